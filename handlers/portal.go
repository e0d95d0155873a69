package handlers

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"mime"
	"mime/multipart"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"github.com/a-h/templ"

	"modelplane/auth"
	"modelplane/web"
)

type sessionInfo struct {
	token string
	csrf  string
}

// frame is what frames every portal page: the signed-in user, their
// session, the team the header shows and the one-time flash message. The
// session middleware loads it once per request, before any handler runs;
// handlers read it with pageFrame and look none of it up again.
type frame struct {
	user    *auth.Principal
	session sessionInfo
	team    string // the header switcher's team: TeamCookie's, or the first
	flash   string
	// flashSet is whether the request carried a flash cookie, which the
	// first page rendered with the frame clears.
	flashSet bool
	// teams is the switcher's team list, loaded at most once and only when
	// a page renders the frame (for a platform admin it is a query).
	teams func() []string
}

// pageFrame returns the request's page frame; nil outside the routes the
// session middleware guards.
func pageFrame(r *http.Request) *frame {
	f, _ := r.Context().Value(keyFrame).(*frame)
	return f
}

// session requires a signed-in user; others go to the sign-in page and come
// back where they were. It is the one place a portal request's frame is
// loaded (loadFrame).
func (s *Server) session(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := r.Cookie(auth.SessionCookie)
		var p *auth.Principal
		var csrf string
		if err == nil {
			p, csrf, err = s.Sessions.Lookup(r.Context(), c.Value)
		}
		if err != nil || p == nil {
			if err != nil && !errors.Is(err, auth.ErrUnauthenticated) && !errors.Is(err, http.ErrNoCookie) {
				s.fail(w, r, err)
				return
			}
			target := "/login?return_to=" + url.QueryEscape(r.URL.RequestURI())
			if r.Header.Get("HX-Request") == "true" {
				// An htmx request fetches a fragment: after signing in the
				// user comes back to the page that asked for it.
				target = "/login?return_to=" + url.QueryEscape(pageOf(r))
				w.Header().Set("HX-Redirect", target)
				w.WriteHeader(http.StatusUnauthorized)
				return
			}
			http.Redirect(w, r, target, http.StatusSeeOther)
			return
		}
		f := s.loadFrame(r, p, sessionInfo{token: c.Value, csrf: csrf})
		ctx := context.WithValue(r.Context(), keyFrame, f)
		next.ServeHTTP(w, setPrincipal(r.WithContext(ctx), p))
	})
}

// loadFrame builds the frame of a request signed in as p. Only the
// platform admin's team list costs a query, and it waits until a page
// renders the frame.
func (s *Server) loadFrame(r *http.Request, p *auth.Principal, si sessionInfo) *frame {
	s.frameLoads.Add(1)
	f := &frame{user: p, session: si, team: activeTeam(r, p)}
	if c, err := r.Cookie(FlashCookie); err == nil {
		f.flashSet = true
		f.flash, _ = url.QueryUnescape(c.Value)
	}
	ctx := r.Context()
	f.teams = sync.OnceValue(func() []string {
		var names []string
		if !p.PlatformAdmin() {
			for _, m := range p.Teams {
				names = append(names, m.Team)
			}
			return names
		}
		s.teamListLoads.Add(1)
		if ts, err := s.Tenant.Teams(ctx, p, 0, 500); err == nil {
			for _, t := range ts {
				names = append(names, t.Name)
			}
		}
		return names
	})
	return f
}

// layout fills the page frame's view for a page titled title under the
// nav section active. The first page rendered clears the flash cookie.
func (f *frame) layout(w http.ResponseWriter, title, active string) web.Layout {
	p := f.user
	l := web.Layout{Title: title, Active: active, User: p.Name, Role: string(p.PlatformRole), CSRF: f.session.csrf,
		Teams: f.teams(), ActiveTeam: f.team, Flash: f.flash}
	for _, m := range p.Teams {
		l.ShowAudit = l.ShowAudit || m.Role == auth.RoleAdmin
	}
	if p.PlatformAdmin() {
		l.ShowAudit, l.ShowFleet = true, true
	}
	if f.flashSet {
		http.SetCookie(w, &http.Cookie{Name: FlashCookie, Path: "/", MaxAge: -1, Secure: true, HttpOnly: true})
	}
	return l
}

// pageOf is the local path of the page an htmx request came from
// (HX-Current-URL), or "/" when it names none of this server's.
func pageOf(r *http.Request) string {
	u, err := url.Parse(r.Header.Get("HX-Current-URL"))
	if err != nil || u.Host != r.Host {
		return "/"
	}
	return auth.LocalPath(u.RequestURI())
}

// csrfCheck refuses a state-changing request whose CSRF token (form field
// "csrf" or header X-CSRF-Token, as htmx sends it) is not the session's.
func (s *Server) csrfCheck(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet || r.Method == http.MethodHead {
			next.ServeHTTP(w, r)
			return
		}
		sent := r.Header.Get("X-CSRF-Token")
		if sent == "" {
			r, sent = csrfFromForm(r)
		}
		if !auth.ValidCSRF(pageFrame(r).session.csrf, sent) {
			s.renderError(w, r, http.StatusForbidden, "the form expired or did not come from this site; reload the page and try again")
			return
		}
		next.ServeHTTP(w, r)
	})
}

type multipartKey struct{}

// csrfFromForm reads the csrf field. A multipart form must send it as its
// first part, so the check happens before any upload is read; the reader,
// positioned after that part, travels on in the context. Only a multipart
// body may reach r.MultipartReader: that call marks the request as read by a
// reader even when it fails, after which r.PostFormValue returns "" for
// every field of a urlencoded form.
func csrfFromForm(r *http.Request) (*http.Request, string) {
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "multipart/form-data" {
		return r, r.PostFormValue("csrf")
	}
	mr, err := r.MultipartReader()
	if err != nil {
		return r, ""
	}
	part, err := mr.NextPart()
	if err != nil || part.FormName() != "csrf" {
		return r, ""
	}
	b, _ := io.ReadAll(io.LimitReader(part, 256))
	return r.WithContext(context.WithValue(r.Context(), multipartKey{}, mr)), string(b)
}

// multipartOf returns the multipart reader csrfCheck started, if any.
func multipartOf(r *http.Request) *multipart.Reader {
	mr, _ := r.Context().Value(multipartKey{}).(*multipart.Reader)
	return mr
}

// FlashCookie carries a one-time message across a redirect. Like the
// session cookie it is a __Host- cookie (Secure, Path=/, no Domain), so
// neither a sibling subdomain nor a plain-http page on the same host can
// plant one. Browsers keep Secure cookies from http://localhost and
// http://127.0.0.1, which is how `modelplane dev` serves the portal.
const FlashCookie = "__Host-mp_flash"

// TeamCookie remembers the team chosen in the header's switcher. It only
// picks what pages show: forms that change a team name it themselves
// (formTeam), so a cookie changed in another tab acts on nothing.
const TeamCookie = "__Host-mp_team"

// formTeam is the team a team-changing form was rendered for, from its
// hidden "team" field, checked against the caller's memberships. ok is false
// when it answered the request itself: 400 without the field, 404 for a team
// the caller is not in (the same answer as a team that does not exist).
func (s *Server) formTeam(w http.ResponseWriter, r *http.Request) (string, bool) {
	p := pageFrame(r).user
	team := strings.TrimSpace(r.PostFormValue("team"))
	if team == "" {
		s.renderError(w, r, http.StatusBadRequest, "the form names no team; reload the page and try again")
		return "", false
	}
	if _, ok := p.Membership(team); !ok && !p.PlatformAdmin() {
		s.renderError(w, r, http.StatusNotFound, "not found")
		return "", false
	}
	return team, true
}

// activeTeam is the team chosen in the header's switcher, or the first.
func activeTeam(r *http.Request, p *auth.Principal) string {
	if c, err := r.Cookie(TeamCookie); err == nil {
		if _, ok := p.Membership(c.Value); ok || p.PlatformAdmin() {
			return c.Value
		}
	}
	if len(p.Teams) > 0 {
		return p.Teams[0].Team
	}
	return ""
}

// render writes a component with a status.
func (s *Server) render(w http.ResponseWriter, r *http.Request, status int, c templ.Component) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	if err := c.Render(r.Context(), w); err != nil {
		s.Log.ErrorContext(r.Context(), "render", slog.String("error", err.Error()))
	}
}

// renderError shows an error page; unknown errors are logged and shown as 500.
func (s *Server) renderError(w http.ResponseWriter, r *http.Request, status int, msg string) {
	l := web.Layout{Title: "Error"}
	if f := pageFrame(r); f != nil {
		l = f.layout(w, "Error", "")
	}
	s.render(w, r, status, web.ErrorPage(web.ErrorProps{Layout: l, Status: status, Message: msg}))
}

// portalError maps a domain error onto an error page.
func (s *Server) portalError(w http.ResponseWriter, r *http.Request, err error) {
	status, msg, _ := statusOf(err)
	if status == http.StatusInternalServerError {
		s.Log.ErrorContext(r.Context(), "request failed", slog.String("error", err.Error()), slog.String("request_id", requestID(r.Context())))
	}
	s.renderError(w, r, status, msg)
}

// redirectFlash sends the browser to target with a one-time message.
func redirectFlash(w http.ResponseWriter, r *http.Request, target, msg string) {
	setFlash(w, msg)
	http.Redirect(w, r, target, http.StatusSeeOther)
}

// setFlash sets the message the next page shows once.
func setFlash(w http.ResponseWriter, msg string) {
	http.SetCookie(w, &http.Cookie{Name: FlashCookie, Value: url.QueryEscape(msg), Path: "/", MaxAge: 60, HttpOnly: true, Secure: true, SameSite: http.SameSiteLaxMode})
}
