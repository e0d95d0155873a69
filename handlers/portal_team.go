package handlers

import (
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"modelplane/audit"
	"modelplane/auth"
	"modelplane/errdefs"
	"modelplane/tenant"
	"modelplane/web"
)

const day = 24 * time.Hour

func when(t *time.Time) string {
	if t == nil {
		return "never"
	}
	return t.UTC().Format("2006-01-02 15:04")
}

// teamProps fills the team page for team, or for the active team when team
// is "" (a form re-rendered after it failed shows the team it was for).
func (s *Server) teamProps(w http.ResponseWriter, r *http.Request, team string) (web.TeamProps, error) {
	f := pageFrame(r)
	p := f.user
	props := web.TeamProps{Layout: f.layout(w, "Team", "team")}
	props.Team = props.ActiveTeam
	if team != "" {
		props.Team = team
	}
	if p.PlatformAdmin() {
		props.PlatformAdmin, props.AllTeams = true, props.Teams
	}
	if props.Team == "" {
		return props, nil
	}
	t, err := s.Tenant.Team(r.Context(), p, props.Team)
	if err != nil {
		return props, err
	}
	props.IsAdmin = p.CanAdmin(t.ID)
	members, err := s.Tenant.Members(r.Context(), p, props.Team)
	if err != nil {
		return props, err
	}
	for _, m := range members {
		props.Members = append(props.Members, web.MemberRow{Email: m.Email, Name: m.Name, Role: string(m.Role)})
	}
	if props.IsAdmin {
		keys, err := s.Tenant.Keys(r.Context(), p, 0, 500)
		if err != nil {
			return props, err
		}
		for _, k := range keys {
			if k.Team != props.Team {
				continue
			}
			created := k.CreatedAt
			props.Keys = append(props.Keys, web.KeyRow{ID: k.ID, Name: k.Name, Prefix: k.Prefix, Team: k.Team, Role: string(k.Role),
				Created: when(&created), Expires: when(k.ExpiresAt), Used: when(k.LastUsedAt), Revoked: k.RevokedAt != nil})
		}
	}
	props.MemberForm.Role, props.KeyForm.Role = "viewer", "viewer"
	return props, nil
}

func (s *Server) portalTeam(w http.ResponseWriter, r *http.Request) {
	props, err := s.teamProps(w, r, "")
	if err != nil {
		s.portalError(w, r, err)
		return
	}
	s.render(w, r, http.StatusOK, web.TeamPage(props))
}

func (s *Server) portalTeamSwitch(w http.ResponseWriter, r *http.Request) {
	team := r.PostFormValue("team")
	if _, ok := pageFrame(r).user.Membership(team); !ok {
		s.renderError(w, r, http.StatusNotFound, "not found")
		return
	}
	http.SetCookie(w, &http.Cookie{Name: TeamCookie, Value: team, Path: "/", MaxAge: 365 * 86400, Secure: true, HttpOnly: true, SameSite: http.SameSiteLaxMode})
	back := "/"
	if u, err := url.Parse(r.Header.Get("Referer")); err == nil && u.Path != "" {
		back = auth.LocalPath(u.RequestURI())
	}
	http.Redirect(w, r, back, http.StatusSeeOther)
}

func (s *Server) teamFormFailed(w http.ResponseWriter, r *http.Request, err error, fill func(*web.TeamProps)) {
	errs, ok := fieldErrors(err)
	if !ok {
		if !errors.Is(err, tenant.ErrLastAdmin) {
			s.portalError(w, r, err)
			return
		}
		errs = web.FieldErrors{"role": tenant.ErrLastAdmin.Error()}
	}
	props, perr := s.teamProps(w, r, r.PostFormValue("team"))
	if perr != nil {
		s.portalError(w, r, perr)
		return
	}
	props.Errors = errs
	fill(&props)
	s.render(w, r, http.StatusUnprocessableEntity, web.TeamPage(props))
}

func (s *Server) portalMemberSet(w http.ResponseWriter, r *http.Request) {
	p := pageFrame(r).user
	team, ok := s.formTeam(w, r)
	if !ok {
		return
	}
	email, role := strings.TrimSpace(r.PostFormValue("email")), r.PostFormValue("role")
	if _, err := s.Tenant.SetMember(r.Context(), p, team, email, auth.Role(role)); err != nil {
		s.teamFormFailed(w, r, err, func(tp *web.TeamProps) { tp.MemberForm = web.MemberRow{Email: email, Role: role} })
		return
	}
	redirectFlash(w, r, "/team", email+" is now "+role+" of "+team+".")
}

func (s *Server) portalKeyCreate(w http.ResponseWriter, r *http.Request) {
	p := pageFrame(r).user
	team, ok := s.formTeam(w, r)
	if !ok {
		return
	}
	name, role, days := r.PostFormValue("name"), r.PostFormValue("key_role"), strings.TrimSpace(r.PostFormValue("expires_in_days"))
	req := tenant.KeyRequest{Name: name, Team: team, Role: auth.Role(role)}
	if days != "" {
		n, err := strconv.Atoi(days)
		if err != nil || n < 1 || n > 3650 {
			s.teamFormFailed(w, r, validateErr("expires_in_days", "must be a whole number of days between 1 and 3650"),
				func(tp *web.TeamProps) { tp.KeyForm = web.KeyRow{Name: name, Role: role, Expires: days} })
			return
		}
		t := s.Clock.Now().Add(time.Duration(n) * day)
		req.ExpiresAt = &t
	}
	raw, _, err := s.Tenant.CreateKey(r.Context(), p, req)
	if err != nil {
		s.teamFormFailed(w, r, err, func(tp *web.TeamProps) { tp.KeyForm = web.KeyRow{Name: name, Role: role, Expires: days} })
		return
	}
	props, err := s.teamProps(w, r, team)
	if err != nil {
		s.portalError(w, r, err)
		return
	}
	props.NewKey = raw
	w.Header().Set("Cache-Control", "no-store")
	s.render(w, r, http.StatusOK, web.TeamPage(props))
}

func (s *Server) portalKeyRevoke(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.ParseInt(chi.URLParam(r, "id"), 10, 64)
	if err != nil {
		s.renderError(w, r, http.StatusNotFound, "not found")
		return
	}
	k, err := s.Tenant.RevokeKey(r.Context(), pageFrame(r).user, id)
	if err != nil {
		s.portalError(w, r, err)
		return
	}
	redirectFlash(w, r, "/team", "Key "+k.Prefix+" revoked.")
}

func (s *Server) portalAudit(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	pg := Page{Cursor: q.Get("cursor"), Limit: 100}
	before, err := pg.after()
	if err != nil {
		s.renderError(w, r, http.StatusBadRequest, "bad cursor")
		return
	}
	f := audit.Filter{Action: q.Get("action"), ObjectType: q.Get("object_type"), Actor: q.Get("actor"), BeforeID: before, Limit: pg.Limit + 1}
	rows, err := s.Audit.List(r.Context(), pageFrame(r).user, f)
	if err != nil {
		s.portalError(w, r, err)
		return
	}
	list := page(rows, pg.Limit, func(a audit.Row) int64 { return a.ID })
	props := web.AuditProps{Layout: pageFrame(r).layout(w, "Audit", "audit"), Action: f.Action, ObjectType: f.ObjectType, Actor: f.Actor}
	if list.Body.NextCursor != "" {
		next := url.Values{"cursor": {list.Body.NextCursor}, "action": {f.Action}, "object_type": {f.ObjectType}, "actor": {f.Actor}}
		props.NextURL = "/audit?" + next.Encode()
	}
	for _, a := range list.Body.Items {
		who, via := auditWho(a)
		props.Rows = append(props.Rows, web.AuditRow{At: a.At.UTC().Format("2006-01-02 15:04:05"), Team: a.Team, Actor: who, Via: via,
			Action: a.Action, Object: a.ObjectType + " " + a.ObjectName, Before: string(a.Before), After: string(a.After)})
	}
	s.render(w, r, http.StatusOK, web.AuditPage(props))
}

// auditWho names the person behind an audit record ("search-admin@example.com")
// and how they acted ("via mpk_2939ab… (api-key)"): the key's prefix only
// when a key was used, since the person is who a reader looks for.
func auditWho(a audit.Row) (who, via string) {
	if a.ActorEmail == "" {
		return a.Actor, a.Via
	}
	if a.Actor != "" && a.Actor != a.ActorEmail {
		// An API key's via names the key again ("api-key mpk_…"): said once.
		kind, _ := strings.CutSuffix(a.Via, " "+a.Actor)
		return a.ActorEmail, "via " + a.Actor + " (" + kind + ")"
	}
	return a.ActorEmail, a.Via
}

func (s *Server) portalTeamCreate(w http.ResponseWriter, r *http.Request) {
	name := strings.TrimSpace(r.PostFormValue("team_name"))
	_, err := s.Tenant.CreateTeam(r.Context(), pageFrame(r).user, name, "")
	if err == nil {
		http.SetCookie(w, &http.Cookie{Name: TeamCookie, Value: name, Path: "/", MaxAge: 365 * 86400, Secure: true, HttpOnly: true, SameSite: http.SameSiteLaxMode})
		redirectFlash(w, r, "/team", "Team "+name+" created.")
		return
	}
	if errors.Is(err, errdefs.ErrConflict) {
		err = validateErr("name", "a team with this name already exists")
	}
	if fe, ok := fieldErrors(err); ok {
		s.teamFormFailed(w, r, validateErr("team_name", fe["name"]), func(tp *web.TeamProps) { tp.TeamForm = name })
		return
	}
	s.portalError(w, r, err)
}
