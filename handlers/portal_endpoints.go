package handlers

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"golang.org/x/sync/errgroup"

	"modelplane/auth"
	"modelplane/endpoint"
	"modelplane/errdefs"
	"modelplane/field"
	"modelplane/web"
)

func endpointRow(e endpoint.Endpoint) web.EndpointRow {
	parts := make([]string, 0, len(e.Traffic))
	for _, t := range e.Traffic {
		parts = append(parts, fmt.Sprintf("%s %d%%", t.Version, t.Weight))
	}
	return web.EndpointRow{Name: e.Name, Team: e.Team, Model: e.Model, Status: e.Status, Tier: e.Tier, Profile: e.InstanceProfile,
		Traffic: strings.Join(parts, ", "), MinReplicas: e.MinReplicas, MaxReplicas: e.MaxReplicas}
}

func (s *Server) portalEndpoints(w http.ResponseWriter, r *http.Request) {
	pg := Page{Cursor: r.URL.Query().Get("cursor"), Limit: 50}
	after, err := pg.after()
	if err != nil {
		s.renderError(w, r, http.StatusBadRequest, "bad cursor")
		return
	}
	f := pageFrame(r)
	es, err := s.Endpoints.List(r.Context(), f.user, after, pg.Limit+1)
	if err != nil {
		s.portalError(w, r, err)
		return
	}
	list := page(es, pg.Limit, func(e endpoint.Endpoint) int64 { return e.ID })
	props := web.EndpointsProps{Layout: f.layout(w, "Endpoints", "endpoints"), NextCursor: list.Body.NextCursor, CanCreate: canCreate(f.user),
		NoTeam: len(f.user.Teams) == 0 && !f.user.PlatformAdmin()}
	if props.Awaiting, err = s.awaitingRows(r.Context(), f.user); err != nil {
		s.portalError(w, r, err)
		return
	}
	for _, e := range list.Body.Items {
		props.Rows = append(props.Rows, endpointRow(e))
	}
	s.render(w, r, http.StatusOK, web.EndpointsPage(props))
}

func (s *Server) endpointNewProps(w http.ResponseWriter, r *http.Request, f web.EndpointForm, errs web.FieldErrors) (web.EndpointNewProps, error) {
	ms, err := s.Registry.Models(r.Context(), pageFrame(r).user, 0, 500)
	if err != nil {
		return web.EndpointNewProps{}, err
	}
	p := web.EndpointNewProps{Layout: pageFrame(r).layout(w, "New endpoint", "endpoints"), Form: f, Errors: errs,
		Profiles: endpoint.InstanceProfiles, Tiers: endpoint.Tiers}
	for _, m := range ms {
		p.Models = append(p.Models, m.Name)
	}
	return p, nil
}

func (s *Server) portalEndpointNew(w http.ResponseWriter, r *http.Request) {
	p, err := s.endpointNewProps(w, r, web.EndpointForm{Tier: "standard", MinReplicas: "1", MaxReplicas: "2", SamplingRate: "0", RetentionDays: "30"}, nil)
	if err != nil {
		s.portalError(w, r, err)
		return
	}
	s.render(w, r, http.StatusOK, web.EndpointNewPage(p))
}

// fieldErrors turns a validation error into form field messages; ok is false
// for any other error.
func fieldErrors(err error) (web.FieldErrors, bool) {
	var verrs field.Errors
	if !errors.As(err, &verrs) {
		return nil, false
	}
	out := web.FieldErrors{}
	for _, f := range verrs {
		// The batching fields are nested in the API (batching.max_batch_size)
		// and flat in the forms.
		field := strings.TrimPrefix(strings.TrimPrefix(f.Field, "metadata."), "batching.")
		if i := strings.IndexAny(field, ".["); i > 0 && !strings.HasPrefix(f.Field, "metadata.") {
			field = field[:i]
		}
		out[field] = f.Message
	}
	return out, true
}

// intField parses a form number, recording a field error when it is not one.
func intField(errs web.FieldErrors, r *http.Request, name string) int32 {
	v, err := strconv.ParseInt(strings.TrimSpace(r.PostFormValue(name)), 10, 32)
	if err != nil {
		errs[name] = "must be a whole number"
	}
	return int32(v)
}

func (s *Server) portalEndpointCreate(w http.ResponseWriter, r *http.Request) {
	// No runtime: the version's decides how it is served (docs/decisions.md,
	// "CPU nodes"), so the form does not offer a choice.
	f := web.EndpointForm{Name: r.PostFormValue("name"), Model: r.PostFormValue("model"), Version: r.PostFormValue("version"),
		Profile: r.PostFormValue("instance_profile"), Tier: r.PostFormValue("tier"),
		MinReplicas: r.PostFormValue("min_replicas"), MaxReplicas: r.PostFormValue("max_replicas"),
		SamplingRate: r.PostFormValue("sampling_rate"), RetentionDays: r.PostFormValue("retention_days")}
	errs := web.FieldErrors{}
	spec := endpoint.Spec{Name: f.Name, Model: f.Model, Version: f.Version, Settings: endpoint.Settings{
		InstanceProfile: f.Profile, Tier: f.Tier, MinReplicas: intField(errs, r, "min_replicas"), MaxReplicas: intField(errs, r, "max_replicas"),
		RetentionDays: intField(errs, r, "retention_days")}}
	f.Batching, spec.Batching = batchingFrom(r, errs)
	rate, err := strconv.ParseFloat(strings.TrimSpace(f.SamplingRate), 64)
	if err != nil {
		errs["sampling_rate"] = "must be a number between 0 and 1"
	}
	spec.SamplingRate = rate
	if len(errs) == 0 {
		_, err = s.Endpoints.Create(r.Context(), pageFrame(r).user, spec)
		if err == nil {
			redirectFlash(w, r, "/endpoints/"+spec.Name, "Endpoint "+spec.Name+" created.")
			return
		}
		var ok bool
		if errs, ok = fieldErrors(err); !ok {
			if errors.Is(err, errdefs.ErrConflict) {
				errs = web.FieldErrors{"name": "an endpoint with this name already exists"}
			} else {
				s.portalError(w, r, err)
				return
			}
		}
	}
	p, err := s.endpointNewProps(w, r, f, errs)
	if err != nil {
		s.portalError(w, r, err)
		return
	}
	s.render(w, r, http.StatusUnprocessableEntity, web.EndpointNewPage(p))
}

// endpointProps fills the endpoint page of e, as the request's
// endpointParam or as a change just left it.
func (s *Server) endpointProps(w http.ResponseWriter, r *http.Request, e endpoint.Endpoint) (web.EndpointProps, error) {
	f := pageFrame(r)
	p := f.user
	// The sections read independent rows: they are read at once, so the
	// page waits for its slowest read, not for the sum of a dozen.
	var (
		versions []string
		reps     []endpoint.Replica
		graph    []endpoint.GraphVersion
		stats    web.StatsProps
		tryIt    web.TryItProps
		rollouts web.RolloutsSection
		scaling  web.AutoscalingProps
	)
	csrf := f.session.csrf
	g, ctx := errgroup.WithContext(r.Context())
	g.Go(func() (err error) {
		if versions, err = s.Registry.VersionNames(ctx, p, e.ModelID); err != nil {
			return err
		}
		rollouts, err = s.rolloutsSection(ctx, p, e, versions, csrf)
		return err
	})
	g.Go(func() (err error) {
		reps, err = s.Endpoints.Replicas(ctx, p, e.Name)
		return err
	})
	if e.Kind == endpoint.KindGraph {
		g.Go(func() (err error) {
			graph, err = s.Endpoints.GraphVersions(ctx, p, e.Name)
			return err
		})
	}
	g.Go(func() error {
		stats = s.statsProps(ctx, e.Name, e.ID)
		return nil
	})
	g.Go(func() (err error) {
		tryIt, err = s.tryItProps(ctx, csrf, e, p, "")
		return err
	})
	g.Go(func() (err error) {
		scaling, err = s.autoscalingProps(ctx, p, e)
		return err
	})
	if err := g.Wait(); err != nil {
		return web.EndpointProps{}, err
	}
	props := web.EndpointProps{Layout: f.layout(w, e.Name, "endpoints"), Row: endpointRow(e), Runtime: e.Runtime,
		SamplingRate: strconv.FormatFloat(e.SamplingRate, 'f', -1, 64), RetentionDays: e.RetentionDays, CanWrite: p.CanWrite(e.TeamID)}
	for _, t := range e.Traffic {
		props.Traffic = append(props.Traffic, web.TrafficRow{Version: t.Version, Weight: t.Weight, Shadow: t.ShadowPercent})
	}
	if x := e.Experiment; x != nil {
		arms := make([]string, len(x.Arms))
		for i, a := range x.Arms {
			arms[i] = fmt.Sprintf("%s %d%%", a.Version, a.Share)
		}
		props.Experiment = x.Name + ": " + strings.Join(arms, ", ")
	}
	props.Profiles, props.Tiers = endpoint.InstanceProfiles, endpoint.Tiers
	props.Settings = web.EndpointForm{Profile: e.InstanceProfile, Tier: e.Tier, MinReplicas: strconv.Itoa(int(e.MinReplicas)),
		MaxReplicas: strconv.Itoa(int(e.MaxReplicas)), SamplingRate: props.SamplingRate, RetentionDays: strconv.Itoa(int(e.RetentionDays)),
		RateLimitRPS: strconv.FormatFloat(e.RateLimitRPS, 'f', -1, 64), RateLimitBurst: strconv.Itoa(int(e.RateLimitBurst)),
		TimeoutMS: strconv.Itoa(int(e.TimeoutMS)), Batching: batchingForm(e.Batching)}
	props.Versions = versions
	props.Replicas = replicasProps(e, p)
	props.Launch = launchProps(reps)
	if e.Kind == endpoint.KindGraph {
		vs := graph
		props.Graph = graphProps(vs)
		props.Graph.CanWrite, props.Graph.CSRF, props.Graph.Endpoint = props.CanWrite, props.CSRF, e.Name
		for _, v := range vs {
			if v.Weight > 0 || props.Graph.NewDefinition == "" {
				b, _ := json.MarshalIndent(v.Definition, "", "  ")
				props.Graph.NewDefinition = string(b)
			}
		}
	}
	props.Stats, props.TryIt, props.Rollouts, props.Autoscaling = stats, tryIt, rollouts, scaling
	props.Unroutable = props.Rollouts.Unroutable
	return props, nil
}

// replicasProps fills the live replicas section; node names link to the
// fleet pages only for those who may open them.
func replicasProps(e endpoint.Endpoint, p *auth.Principal) web.ReplicasProps {
	out := web.ReplicasProps{Endpoint: e.Name, Status: e.Status, PlacementError: e.PlacementError, LinkNodes: p.PlatformAdmin()}
	for _, r := range e.Replicas {
		out.Rows = append(out.Rows, web.ReplicaRow{Name: r.Name, Version: r.Version, Node: r.Node, GPUType: r.GPUType, Profile: r.Profile,
			Slots: strings.Join(r.Slots, ", "), State: r.State, Addr: r.Addr, Reason: r.Reason, CrashLog: crashLog(r.Reason)})
	}
	return out
}

// launchProps fills the section on what the replicas run, from those
// whose node reported it.
func launchProps(reps []endpoint.Replica) web.LaunchProps {
	var out web.LaunchProps
	for _, r := range reps {
		l := r.Launch
		if l == nil {
			continue
		}
		row := web.LaunchRow{Replica: r.Name, Version: r.Version, Node: r.Node, Command: shellLine(l.Argv), Env: l.Env, Dir: l.Dir, Truncated: l.Truncated}
		for _, f := range l.Files {
			row.Files = append(row.Files, web.LaunchFileRow{Path: f.Path, Content: f.Content, Link: f.Link, Truncated: f.Truncated})
		}
		out.Rows = append(out.Rows, row)
	}
	return out
}

// shellLine is argv as one POSIX shell line an operator can paste: each
// argument single-quoted unless it holds only characters no shell treats
// specially.
func shellLine(argv []string) string {
	out := make([]string, len(argv))
	for i, a := range argv {
		if a != "" && strings.Trim(a, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:,+@%") == "" {
			out[i] = a
			continue
		}
		out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(out, " ")
}

// portalEndpointReplicas is the endpoint page's replicas section alone, which
// the page re-fetches every 2 s.
func (s *Server) portalEndpointReplicas(w http.ResponseWriter, r *http.Request) {
	s.render(w, r, http.StatusOK, web.ReplicasSection(replicasProps(endpointParam(r), pageFrame(r).user)))
}

func (s *Server) portalEndpoint(w http.ResponseWriter, r *http.Request) {
	props, err := s.endpointProps(w, r, endpointParam(r))
	if err != nil {
		s.portalError(w, r, err)
		return
	}
	props.Advice = s.adviceLines(r, props.Row.Name)
	if props.Graph != nil {
		props.Graph.Cost = s.graphCost(r, props.Row.Name)
	}
	s.render(w, r, http.StatusOK, web.EndpointPage(props))
}

// portalTrafficSet sets the split from "w_<version>" fields and the shadow
// percentages from "s_<version>" (a version of weight 0 is kept only when it
// is a shadow). htmx gets the traffic fragment back; a plain form post gets
// the whole page.
func (s *Server) portalTrafficSet(w http.ResponseWriter, r *http.Request) {
	e := endpointParam(r)
	if err := r.ParseForm(); err != nil {
		s.renderError(w, r, http.StatusBadRequest, "malformed form")
		return
	}
	var weights []endpoint.Weight
	errs := web.FieldErrors{}
	for k, vals := range r.PostForm {
		v, ok := strings.CutPrefix(k, "w_")
		if !ok || strings.TrimSpace(vals[0]) == "" {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(vals[0]), 10, 32)
		if err != nil {
			errs["weights"] = "weight of " + v + " must be a whole number"
			continue
		}
		shadow := 0.0
		if sv := strings.TrimSpace(r.PostForm.Get("s_" + v)); sv != "" {
			if shadow, err = strconv.ParseFloat(sv, 64); err != nil {
				errs["shadow"] = "shadow percent of " + v + " must be a number between 0 and 100"
				continue
			}
		}
		if n > 0 || shadow != 0 {
			weights = append(weights, endpoint.Weight{Version: v, Weight: int32(n), ShadowPercent: shadow})
		}
	}
	status := http.StatusOK
	if len(errs) == 0 {
		if _, err := s.Endpoints.SetTraffic(r.Context(), pageFrame(r).user, e.Name, weights); err != nil {
			fe, ok := fieldErrors(err)
			if !ok {
				s.portalError(w, r, err)
				return
			}
			errs = fe
		}
	}
	if len(errs) > 0 {
		status = http.StatusUnprocessableEntity
	} else {
		// The split changed: the page shows it as stored, with the
		// replicas the change brought.
		var err error
		if e, err = s.Endpoints.Get(r.Context(), pageFrame(r).user, e.Name); err != nil {
			s.portalError(w, r, err)
			return
		}
	}
	props, err := s.endpointProps(w, r, e)
	if err != nil {
		s.portalError(w, r, err)
		return
	}
	props.TrafficErrors = errs
	props.TrafficSaved = status == http.StatusOK
	if !props.TrafficSaved {
		// Show the weights as typed, not the stored ones, next to the error.
		props.Traffic = props.Traffic[:0]
		for _, v := range props.Versions {
			if n, err := strconv.ParseInt(strings.TrimSpace(r.PostForm.Get("w_"+v)), 10, 32); err == nil {
				shadow, _ := strconv.ParseFloat(strings.TrimSpace(r.PostForm.Get("s_"+v)), 64)
				props.Traffic = append(props.Traffic, web.TrafficRow{Version: v, Weight: int32(n), Shadow: shadow})
			}
		}
	}
	if r.Header.Get("HX-Request") == "true" && r.Header.Get("HX-Boosted") != "true" {
		s.render(w, r, status, web.TrafficForm(props))
		return
	}
	s.render(w, r, status, web.EndpointPage(props))
}

func (s *Server) portalEndpointDelete(w http.ResponseWriter, r *http.Request) {
	e := endpointParam(r)
	name := e.Name
	if r.PostFormValue("confirm") != name {
		props, err := s.endpointProps(w, r, e)
		if err != nil {
			s.portalError(w, r, err)
			return
		}
		props.TrafficErrors = web.FieldErrors{"confirm": "type " + name + " to confirm"}
		s.render(w, r, http.StatusUnprocessableEntity, web.EndpointPage(props))
		return
	}
	if err := s.Endpoints.Delete(r.Context(), pageFrame(r).user, name); err != nil {
		s.portalError(w, r, err)
		return
	}
	redirectFlash(w, r, "/endpoints", "Endpoint "+name+" deleted.")
}

// canCreate reports whether the user may create models or endpoints in any
// team, so list pages offer the button only to them.
func canCreate(p *auth.Principal) bool {
	for _, m := range p.Teams {
		if p.CanWrite(m.TeamID) {
			return true
		}
	}
	return p.PlatformAdmin()
}

// settingsFrom reads the settings form, recording number errors.
func settingsFrom(r *http.Request, errs web.FieldErrors) (web.EndpointForm, endpoint.Settings) {
	f := web.EndpointForm{Profile: r.PostFormValue("instance_profile"), Tier: r.PostFormValue("tier"),
		MinReplicas: r.PostFormValue("min_replicas"), MaxReplicas: r.PostFormValue("max_replicas"),
		SamplingRate: r.PostFormValue("sampling_rate"), RetentionDays: r.PostFormValue("retention_days"),
		RateLimitRPS: r.PostFormValue("rate_limit_rps"), RateLimitBurst: r.PostFormValue("rate_limit_burst"), TimeoutMS: r.PostFormValue("timeout_ms")}
	set := endpoint.Settings{InstanceProfile: f.Profile, Tier: f.Tier, MinReplicas: intField(errs, r, "min_replicas"),
		MaxReplicas: intField(errs, r, "max_replicas"), RetentionDays: intField(errs, r, "retention_days")}
	rate, err := strconv.ParseFloat(strings.TrimSpace(f.SamplingRate), 64)
	if err != nil {
		errs["sampling_rate"] = "must be a number between 0 and 1"
	}
	set.SamplingRate = rate
	// The gateway settings may be left blank: 0, the gateway's default.
	if v := strings.TrimSpace(f.RateLimitRPS); v != "" {
		if set.RateLimitRPS, err = strconv.ParseFloat(v, 64); err != nil {
			errs["rate_limit_rps"] = "must be a number of requests per second"
		}
	}
	if strings.TrimSpace(f.RateLimitBurst) != "" {
		set.RateLimitBurst = intField(errs, r, "rate_limit_burst")
	}
	if strings.TrimSpace(f.TimeoutMS) != "" {
		set.TimeoutMS = intField(errs, r, "timeout_ms")
	}
	f.Batching, set.Batching = batchingFrom(r, errs)
	return f, set
}

func (s *Server) portalEndpointSettings(w http.ResponseWriter, r *http.Request) {
	e := endpointParam(r)
	name := e.Name
	errs := web.FieldErrors{}
	f, set := settingsFrom(r, errs)
	if len(errs) == 0 {
		_, err := s.Endpoints.Update(r.Context(), pageFrame(r).user, name, set)
		if err == nil {
			redirectFlash(w, r, "/endpoints/"+name, "Settings saved.")
			return
		}
		var ok bool
		if errs, ok = fieldErrors(err); !ok {
			s.portalError(w, r, err)
			return
		}
	}
	props, err := s.endpointProps(w, r, e)
	if err != nil {
		s.portalError(w, r, err)
		return
	}
	props.Settings, props.SettingsErrors = f, errs
	s.render(w, r, http.StatusUnprocessableEntity, web.EndpointPage(props))
}
