package handlers

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"modelplane/auth"
	"modelplane/chargeback"
	"modelplane/endpoint"
	"modelplane/judge"
	"modelplane/money"
	"modelplane/rollout"
	"modelplane/web"
)

const portalTime = "2006-01-02 15:04:05"

func rolloutRow(r rollout.Rollout) web.RolloutRow {
	row := web.RolloutRow{ID: r.ID, Endpoint: r.Endpoint, From: r.FromVersion, To: r.ToVersion, Strategy: r.Strategy, State: r.State,
		Paused: r.Paused, Initiator: rolloutInitiator(r), Created: r.CreatedAt.UTC().Format(portalTime)}
	if r.Active() && r.StepStartedAt != nil && r.StepIndex < len(r.Steps) {
		row.Percent = r.Steps[r.StepIndex].Percent
	}
	return row
}

// rolloutInitiator names the person who started r, with the key's prefix
// when a key was used ("search-admin@example.com via mpk_2939…").
func rolloutInitiator(r rollout.Rollout) string { return r.StartedBy }

// rolloutsSection fills the endpoint page's rollouts section.
func (s *Server) rolloutsSection(ctx context.Context, p *auth.Principal, e endpoint.Endpoint, versions []string, csrf string) (web.RolloutsSection, error) {
	rs, err := s.Rollouts.List(ctx, p, e.Name, 10)
	if err != nil {
		return web.RolloutsSection{}, err
	}
	out := web.RolloutsSection{Endpoint: e.Name, CSRF: csrf, CanStart: p.CanWrite(e.TeamID), Versions: versions,
		Form: web.RolloutForm{Strategy: rollout.Canary, Steps: "1, 5, 25, 50, 100", BakeMinutes: "10", IntervalSeconds: "30"}}
	var serving []string
	for _, t := range e.Traffic {
		if t.Weight > 0 {
			serving = append(serving, t.Version)
		}
	}
	if out.Unroutable, err = s.Registry.Unroutables(ctx, p, e.ModelID, serving); err != nil {
		return web.RolloutsSection{}, err
	}
	out.Form.Version = defaultCandidate(e, versions, out.Unroutable)

	for _, r := range rs {
		out.Rows = append(out.Rows, rolloutRow(r))
	}
	return out, nil
}

// defaultCandidate is the rollout form's first choice: the newest version
// (versions are oldest first) that takes no traffic and can be rolled out
// (not in unroutable), never the version already serving all of it; ""
// when there is none.
func defaultCandidate(e endpoint.Endpoint, versions []string, unroutable map[string]string) string {
	serving := map[string]bool{}
	for _, t := range e.Traffic {
		if t.Weight > 0 {
			serving[t.Version] = true
		}
	}
	for i := len(versions) - 1; i >= 0; i-- {
		if _, bad := unroutable[versions[i]]; !serving[versions[i]] && !bad {
			return versions[i]
		}
	}
	return ""
}

// awaitingRows are the rollouts waiting for p's approval.
func (s *Server) awaitingRows(ctx context.Context, p *auth.Principal) ([]web.RolloutRow, error) {
	rs, err := s.Rollouts.AwaitingApproval(ctx, p)
	if err != nil {
		return nil, err
	}
	var out []web.RolloutRow
	for _, r := range rs {
		out = append(out, rolloutRow(r))
	}
	return out, nil
}

func fmtMS(v float64) string {
	if v == 0 {
		return "–"
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

// rolloutProps fills the rollout page of r for p.
func rolloutProps(p *auth.Principal, l web.Layout, r rollout.Rollout) web.RolloutProps {
	props := web.RolloutProps{Layout: l, ID: r.ID, Endpoint: r.Endpoint, Team: r.Team, From: r.FromVersion, To: r.ToVersion,
		Strategy: r.Strategy, State: r.State, Reason: r.Reason, Initiator: rolloutInitiator(r), Created: r.CreatedAt.UTC().Format(portalTime),
		Paused: r.Paused, Active: r.Active(), CanApprove: rollout.CanApprove(p, r), CanOperate: rollout.CanOperate(p, r),
		CanCanary: r.Strategy == rollout.Shadow && rollout.CanOperate(p, r)}
	if r.State == rollout.StateAwaitingApproval {
		props.WaitingFor = "Waiting for a team admin other than " + cmp.Or(r.InitiatorEmail, r.Initiator) + " to approve " + r.ToVersion + " at 100 percent."
		for _, a := range r.Approvals {
			if a.StepIndex == r.ApprovalStep() {
				props.WaitingFor = a.Approver + " " + a.Decision + "d; the controller acts on it within a second."
			}
		}
	}
	for i, st := range r.Steps {
		status := "waiting"
		switch {
		case r.State == rollout.StatePromoted || i < r.StepIndex:
			status = "done"
		case r.State == rollout.StateAwaitingApproval && i == r.ApprovalStep():
			status = "approval"
		case i == r.StepIndex && r.StepStartedAt != nil && r.Active():
			status = "current"
		case i == r.StepIndex && !r.Active():
			status = "stopped"
		}
		props.Steps = append(props.Steps, web.RolloutStep{Percent: st.Percent, Bake: (time.Duration(st.BakeSeconds) * time.Second).String(), Status: status})
	}
	for _, a := range r.Approvals {
		props.Approvals = append(props.Approvals, web.RolloutApproval{Approver: a.Approver, Decision: a.Decision, Comment: a.Comment, At: a.At.UTC().Format(portalTime)})
	}
	var verdicts []rollout.Event
	for i := len(r.Events) - 1; i >= 0; i-- {
		e := r.Events[i]
		props.Events = append(props.Events, web.RolloutEvent{At: e.At.UTC().Format(portalTime), Kind: e.Kind, Decision: e.Decision,
			State: e.State, Message: e.Message, Actor: e.Actor})
		if e.Kind == "verdict" && e.Verdict != nil {
			if len(verdicts) == 0 && e.Windows != nil {
				w := e.Windows
				props.WindowSpan = fmt.Sprintf("%s to %s", w.From.UTC().Format("15:04:05"), w.To.UTC().Format("15:04:05"))
				props.Window = []web.RolloutSide{
					{Version: r.ToVersion + " (candidate)", Requests: w.Candidate.Requests, Errors: w.Candidate.Errors, Streams: w.Candidate.Streams,
						P99MS: fmtMS(w.Candidate.P99MS), P99TPOTMS: fmtMS(w.Candidate.P99TPOTMS)},
					{Version: r.FromVersion + " (incumbent)", Requests: w.Incumbent.Requests, Errors: w.Incumbent.Errors, Streams: w.Incumbent.Streams,
						P99MS: fmtMS(w.Incumbent.P99MS), P99TPOTMS: fmtMS(w.Incumbent.P99TPOTMS)},
				}
				props.Drift = rolloutDrift(w.Drift)
			}
			if len(verdicts) < 60 {
				verdicts = append(verdicts, e)
			}
		}
	}
	// Oldest first for the charts.
	for i, j := 0, len(verdicts)-1; i < j; i, j = i+1, j-1 {
		verdicts[i], verdicts[j] = verdicts[j], verdicts[i]
	}
	props.Checks = checkCharts(verdicts)
	props.DriftURL = "/endpoints/" + url.PathEscape(r.Endpoint) + "/drift"
	for _, c := range props.Checks {
		props.HasDriftCheck = props.HasDriftCheck || c.ID == "check-drift"
	}
	if props.Events == nil {
		props.Events = []web.RolloutEvent{}
	}
	return props
}

// rolloutDrift is a window's output drift for people; nil when it was not
// measured.
func rolloutDrift(d *judge.Drift) *web.RolloutDrift {
	if d == nil {
		return nil
	}
	out := &web.RolloutDrift{Metric: d.Metric, Value: strconv.FormatFloat(d.Value, 'f', 4, 64), Threshold: strconv.FormatFloat(d.Threshold, 'f', 4, 64),
		CandidateSamples: d.CandidateSamples, IncumbentSamples: d.IncumbentSamples, Status: "agrees"}
	switch {
	case !d.Enough:
		out.Status = "not_enough_data"
	case d.Value > d.Threshold:
		out.Status = "drifting"
	}
	return out
}

// checkCharts draws every judged metric across the verdicts: the
// candidate's value, the threshold it was held to, and the incumbent's value
// where the check compares the two. A missing number is drawn as 0.
func checkCharts(verdicts []rollout.Event) []web.Chart {
	var names []string
	seen := map[string]bool{}
	for _, v := range verdicts {
		for _, c := range v.Verdict.Checks {
			if !seen[c.Name] {
				seen[c.Name] = true
				names = append(names, c.Name)
			}
		}
	}
	var out []web.Chart
	for _, name := range names {
		cand := make([]float64, len(verdicts))
		thr := make([]float64, len(verdicts))
		inc := make([]float64, len(verdicts))
		hasInc := false
		for i, v := range verdicts {
			for _, c := range v.Verdict.Checks {
				if c.Name != name {
					continue
				}
				cand[i], thr[i] = c.Candidate, c.Threshold
				if c.Incumbent != nil {
					inc[i], hasInc = *c.Incumbent, true
				}
			}
		}
		unit := ""
		switch {
		case strings.Contains(name, "_ms"):
			unit = "ms"
		case strings.HasSuffix(name, "_pct"):
			unit = "%"
		}
		ch := web.Chart{ID: "check-" + name, Title: name, Unit: unit,
			Lines: []web.ChartLine{{Label: "candidate", Values: cand}, {Label: "threshold", Values: thr}}}
		if hasInc {
			ch.Lines = append(ch.Lines, web.ChartLine{Label: "incumbent", Values: inc})
		}
		if len(verdicts) > 0 {
			ch.From, ch.To = chartTime(verdicts[0].At, verdicts[len(verdicts)-1].At)
		}
		out = append(out, ch)
	}
	return out
}

func (s *Server) portalRollout(w http.ResponseWriter, r *http.Request) {
	f, ro := pageFrame(r), rolloutParam(r)
	props := rolloutProps(f.user, f.layout(w, fmt.Sprintf("Rollout %d", ro.ID), "endpoints"), ro)
	if s.Chargeback != nil {
		var to time.Time
		if ro.FinishedAt != nil {
			to = *ro.FinishedAt
		}
		// A chargeback store that does not answer costs the page its cost
		// section, not the rollout's state.
		if c, err := s.Chargeback.Canary(r.Context(), f.user, ro.Endpoint, ro.ToVersion, ro.FromVersion, ro.CreatedAt, to); err != nil {
			s.Log.WarnContext(r.Context(), "rollout cost", slog.Int64("rollout", ro.ID), slog.String("error", err.Error()))
		} else {
			props.Cost = rolloutCost(c, ro.FinishedAt == nil)
		}
	}
	s.render(w, r, http.StatusOK, web.RolloutPage(props))
}

// rolloutCost shows a canary's cost; running says the window ends now.
func rolloutCost(c chargeback.Canary, running bool) *web.RolloutCost {
	window := c.From.Format(portalTime) + " – " + c.To.Format(portalTime)
	if running {
		window = "since " + c.From.Format(portalTime)
	}
	change := "+$" + money.Dollars(c.MonthlyChangeMicroUSD)
	if c.MonthlyChangeMicroUSD < 0 {
		change = "−$" + money.Dollars(-c.MonthlyChangeMicroUSD)
	}
	out := &web.RolloutCost{From: c.Incumbent.Version, To: c.Candidate.Version, Window: window, SoFar: money.Dollars(c.Candidate.CostMicroUSD),
		IncumbentSoFar: money.Dollars(c.Incumbent.CostMicroUSD), CandidatePerHour: unitDollars(c.Candidate.PerHourMicroUSD),
		IncumbentPerHour: unitDollars(c.Incumbent.PerHourMicroUSD), MonthlyChange: change}
	for _, v := range []chargeback.VersionCost{c.Candidate, c.Incumbent} {
		out.Versions = append(out.Versions, web.RolloutCostVersion{Version: v.Version, GPUHours: hoursOf(v.GPUSeconds - v.CPUCoreSeconds),
			CPUCoreHours: hoursOf(v.CPUCoreSeconds), Cost: money.Dollars(v.CostMicroUSD), PerHour: unitDollars(v.PerHourMicroUSD)})
	}
	return out
}

// portalRolloutLive is the rollout page's live section alone.
func (s *Server) portalRolloutLive(w http.ResponseWriter, r *http.Request) {
	f := pageFrame(r)
	s.render(w, r, http.StatusOK, web.RolloutLive(rolloutProps(f.user, f.layout(w, "", "endpoints"), rolloutParam(r))))
}

// sseLifetime bounds one event stream; the browser's EventSource reconnects
// (with Last-Event-ID), so a stream never outlives a lost session by long.
const sseLifetime = 5 * time.Minute

// portalRolloutEvents streams the rollout's new timeline entries as
// server-sent events. It polls PostgreSQL once a second rather than
// subscribing to mp.events: the portal may run on any control-plane
// replica, the events table is the record, and a second of delay is what
// the page needs.
func (s *Server) portalRolloutEvents(w http.ResponseWriter, r *http.Request) {
	f, ro := pageFrame(r), rolloutParam(r)
	id := ro.ID
	var last int64
	if n, err := strconv.ParseInt(r.Header.Get("Last-Event-ID"), 10, 64); err == nil && n > 0 {
		last = n
	} else if len(ro.Events) > 0 {
		last = ro.Events[len(ro.Events)-1].ID
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	if _, err := fmt.Fprint(w, "retry: 2000\n: following rollout events\n\n"); err != nil {
		return
	}
	_ = rc.Flush()
	ctx, cancel := context.WithTimeout(r.Context(), sseLifetime)
	defer cancel()
	tick := s.Clock.NewTicker(time.Second, "portal", "rollout_events")
	defer tick.Stop()
	idle := 0
	changed := s.Rollouts.Changes()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-changed:
		}
		// The stream ends with the session (logout, idle or absolute
		// timeout) and with the membership of the rollout's team: p is read
		// again each time (Events, scoped by p's teams, would otherwise
		// just find nothing new).
		p, err := s.Sessions.Check(ctx, f.session.token)
		if err != nil {
			return
		}
		if _, ok := p.Membership(ro.Team); !ok && !p.PlatformAdmin() {
			return
		}
		// Taken before the read: a change committed after it wakes the
		// next round at once instead of at the next tick.
		changed = s.Rollouts.Changes()
		evs, err := s.Rollouts.Events(ctx, p, id, last, 100)
		if err != nil {
			return
		}
		for _, e := range evs {
			b, _ := json.Marshal(map[string]any{"kind": e.Kind, "decision": e.Decision, "state": e.State, "message": e.Message, "at": e.At})
			if _, err := fmt.Fprintf(w, "id: %d\ndata: %s\n\n", e.ID, b); err != nil {
				return
			}
			last = e.ID
		}
		if idle++; len(evs) > 0 || idle >= 15 {
			if len(evs) == 0 {
				if _, err := fmt.Fprint(w, ": keep-alive\n\n"); err != nil {
					return
				}
			}
			idle = 0
			if err := rc.Flush(); err != nil {
				return
			}
		}
	}
}

// portalRolloutAction runs one button of the rollout page. htmx gets the
// live section back; a plain form post goes back to the page.
func (s *Server) portalRolloutAction(w http.ResponseWriter, r *http.Request) {
	f, ro := pageFrame(r), rolloutParam(r)
	p, id := f.user, ro.ID
	comment := strings.TrimSpace(r.PostFormValue("comment"))
	name := chi.URLParam(r, "action")
	acts := s.rolloutActions()
	i := slices.IndexFunc(acts, func(a rolloutAction) bool { return a.name == name })
	if i < 0 {
		s.renderError(w, r, http.StatusNotFound, "not found")
		return
	}
	c, err := acts[i].fn(r.Context(), p, id, comment)
	if err == nil && name == "canary" {
		redirectFlash(w, r, fmt.Sprintf("/rollouts/%d", c.ID), "Canary started.")
		return
	}
	status := http.StatusOK
	var conflict *rollout.ConflictError
	msg := ""
	switch {
	case errors.As(err, &conflict):
		status, msg = http.StatusUnprocessableEntity, conflict.Msg
	case err != nil:
		s.portalError(w, r, err)
		return
	}
	if r.Header.Get("HX-Request") != "true" || r.Header.Get("HX-Boosted") == "true" {
		if msg == "" {
			msg = "Done."
		}
		redirectFlash(w, r, fmt.Sprintf("/rollouts/%d", id), msg)
		return
	}
	if err == nil {
		ro = c // the rollout as the action left it
	}
	props := rolloutProps(p, f.layout(w, "", "endpoints"), ro)
	props.Error = msg
	s.render(w, r, status, web.RolloutLive(props))
}

// portalRolloutStart starts a rollout from the endpoint page's form.
func (s *Server) portalRolloutStart(w http.ResponseWriter, r *http.Request) {
	e := endpointParam(r)
	name := e.Name
	f := web.RolloutForm{Version: r.PostFormValue("version"), Strategy: r.PostFormValue("strategy"), Steps: r.PostFormValue("steps"),
		BakeMinutes: r.PostFormValue("bake_minutes"), IntervalSeconds: r.PostFormValue("interval_seconds"),
		AcceptWorse: r.PostFormValue("accept_worse_metrics") == "yes"}
	errs := web.FieldErrors{}
	bake, err := strconv.ParseFloat(strings.TrimSpace(f.BakeMinutes), 64)
	if err != nil || bake < 0 {
		errs["bake_minutes"] = "must be a number of minutes"
	}
	interval, err := strconv.ParseFloat(strings.TrimSpace(f.IntervalSeconds), 64)
	if err != nil || interval <= 0 {
		errs["interval_seconds"] = "must be a positive number of seconds"
	}
	var steps []rollout.Step
	for part := range strings.SplitSeq(f.Steps, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(part))
		if err != nil {
			errs["steps"] = "must be whole percentages separated by commas"
			break
		}
		steps = append(steps, rollout.Step{Percent: n, BakeSeconds: bake * 60})
	}
	p := pageFrame(r).user
	if len(errs) == 0 {
		ro, err := s.Rollouts.Start(r.Context(), p, name, rollout.Spec{Version: f.Version, Strategy: f.Strategy, Steps: steps,
			EvaluationInterval: time.Duration(interval * float64(time.Second)), AcceptWorseMetrics: f.AcceptWorse})
		if err == nil {
			redirectFlash(w, r, fmt.Sprintf("/rollouts/%d", ro.ID), "Rollout started.")
			return
		}
		var conflict *rollout.ConflictError
		var worse *rollout.WorseError
		var ok bool
		switch {
		case errors.As(err, &conflict):
			errs = web.FieldErrors{"form": conflict.Msg}
		case errors.As(err, &worse):
			// The same form again, with why and a field that lets it through.
			f.Worse = worse.Reasons
		default:
			if errs, ok = fieldErrors(err); !ok {
				s.portalError(w, r, err)
				return
			}
		}
	}
	props, err := s.endpointProps(w, r, e)
	if err != nil {
		s.portalError(w, r, err)
		return
	}
	props.Rollouts.Form, props.Rollouts.Errors = f, errs
	s.render(w, r, http.StatusUnprocessableEntity, web.EndpointPage(props))
}
