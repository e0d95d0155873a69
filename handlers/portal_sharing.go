package handlers

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"modelplane/grant"
	"modelplane/web"
)

// portalSharing is an endpoint's sharing page: its grants and the form.
func (s *Server) portalSharing(w http.ResponseWriter, r *http.Request) {
	s.renderSharing(w, r, http.StatusOK, web.SharingProps{})
}

func (s *Server) renderSharing(w http.ResponseWriter, r *http.Request, status int, props web.SharingProps) {
	e := endpointParam(r)
	f := pageFrame(r)
	gs, err := s.Grants.List(r.Context(), f.user, e.Name)
	if err != nil {
		s.portalError(w, r, err)
		return
	}
	props.Layout = f.layout(w, "Sharing "+e.Name, "endpoints")
	props.Endpoint, props.Team, props.CanEdit = e.Name, e.Team, f.user.CanWrite(e.TeamID)
	for _, g := range gs {
		props.Grants = append(props.Grants, grantView(g))
	}
	s.render(w, r, status, web.SharingPage(props))
}

// grantView writes a grant's limits as people read them.
func grantView(g grant.Grant) web.GrantView {
	v := web.GrantView{Team: g.Team, RateLimit: "unlimited", DailyQuota: "unlimited", Sampling: "no", GrantedBy: g.GrantedBy,
		UpdatedAt: g.UpdatedAt.UTC().Format(time.RFC3339)}
	if g.RateLimitRPS > 0 {
		v.RateLimit = strconv.FormatFloat(g.RateLimitRPS, 'f', -1, 64) + "/s"
		if g.RateLimitBurst > 0 {
			v.RateLimit += fmt.Sprintf(" (burst %d)", g.RateLimitBurst)
		}
	}
	if g.DailyQuota > 0 {
		v.DailyQuota = groupedInt(g.DailyQuota) + "/day"
	}
	if g.Sampling {
		v.Sampling = "yes"
	}
	return v
}

// portalGrantSet grants a team access from the form, or changes its limits.
func (s *Server) portalGrantSet(w http.ResponseWriter, r *http.Request) {
	e := endpointParam(r)
	form := web.GrantForm{Team: strings.TrimSpace(r.PostFormValue("team")), RateLimitRPS: strings.TrimSpace(r.PostFormValue("rate_limit_rps")),
		RateLimitBurst: strings.TrimSpace(r.PostFormValue("rate_limit_burst")), DailyQuota: strings.TrimSpace(r.PostFormValue("daily_quota")),
		Sampling: r.PostFormValue("sampling") == "true"}
	errs := web.FieldErrors{}
	var l grant.Limits
	var err error
	if form.RateLimitRPS != "" {
		if l.RateLimitRPS, err = strconv.ParseFloat(form.RateLimitRPS, 64); err != nil {
			errs["rate_limit_rps"] = "must be a number of requests per second, e.g. 50 or 0.5"
		}
	}
	if form.RateLimitBurst != "" {
		b, err := strconv.ParseInt(form.RateLimitBurst, 10, 32)
		if err != nil {
			errs["rate_limit_burst"] = "must be a whole number"
		}
		l.RateLimitBurst = int32(b)
	}
	if form.DailyQuota != "" {
		if l.DailyQuota, err = strconv.ParseInt(form.DailyQuota, 10, 64); err != nil {
			errs["daily_quota"] = "must be a whole number of requests"
		}
	}
	l.Sampling = form.Sampling
	if form.Team == "" {
		errs["team"] = "name the team to share with"
	}
	if len(errs) == 0 {
		_, err = s.Grants.Set(r.Context(), pageFrame(r).user, e.Name, form.Team, l)
		if err == nil {
			redirectFlash(w, r, "/endpoints/"+e.Name+"/sharing", fmt.Sprintf("Shared %s with team %s.", e.Name, form.Team))
			return
		}
		var ok bool
		if errs, ok = fieldErrors(err); !ok {
			s.portalError(w, r, err)
			return
		}
	}
	s.renderSharing(w, r, http.StatusUnprocessableEntity, web.SharingProps{Form: form, Errors: errs})
}

// portalGrantRevoke revokes a team's grant; when inference graphs called
// the endpoint through it, the page names them.
func (s *Server) portalGrantRevoke(w http.ResponseWriter, r *http.Request) {
	e := endpointParam(r)
	team := chi.URLParam(r, "team")
	rv, err := s.Grants.Revoke(r.Context(), pageFrame(r).user, e.Name, team)
	if err != nil {
		s.portalError(w, r, err)
		return
	}
	if len(rv.BrokenGraphs) > 0 {
		s.renderSharing(w, r, http.StatusOK, web.SharingProps{Broken: rv.BrokenGraphs})
		return
	}
	redirectFlash(w, r, "/endpoints/"+e.Name+"/sharing", fmt.Sprintf("Team %s may no longer call %s.", team, e.Name))
}

// portalShared is the "shared with me" page.
func (s *Server) portalShared(w http.ResponseWriter, r *http.Request) {
	f := pageFrame(r)
	items, err := s.Grants.SharedWith(r.Context(), f.user)
	if err != nil {
		s.portalError(w, r, err)
		return
	}
	props := web.SharedProps{Layout: f.layout(w, "Shared with me", "shared")}
	for _, it := range items {
		g := grantView(it.Grant)
		path := "/v1/endpoints/" + it.Endpoint + "/predict"
		if it.Task == "llm" {
			path = "/v1/endpoints/" + it.Endpoint + "/chat/completions"
		}
		props.Items = append(props.Items, web.SharedView{Endpoint: it.Endpoint, Owner: it.Owner, Team: it.Team, Model: it.Model, Task: it.Task,
			Path: path, RateLimit: g.RateLimit, DailyQuota: g.DailyQuota, Sampling: g.Sampling,
			InputSchema: prettyJSON(it.InputSchema), OutputSchema: prettyJSON(it.OutputSchema), Features: strings.Join(it.FeatureNames, ", ")})
	}
	s.render(w, r, http.StatusOK, web.SharedPage(props))
}

// prettyJSON indents a schema for a <pre>; one that is not JSON is shown
// as it is.
func prettyJSON(raw []byte) string {
	var b bytes.Buffer
	if json.Indent(&b, raw, "", "  ") != nil {
		return string(raw)
	}
	return b.String()
}
