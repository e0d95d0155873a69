package handlers

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"modelplane/auth"
	"modelplane/autoscale"
	"modelplane/endpoint"
	"modelplane/web"
)

// timelineDecisions is how many decisions the endpoint page shows.
const timelineDecisions = 50

// autoscalingProps fills the endpoint page's autoscaling section.
func (s *Server) autoscalingProps(ctx context.Context, p *auth.Principal, e endpoint.Endpoint) (web.AutoscalingProps, error) {
	a, err := s.Endpoints.Autoscaling(ctx, p, e.Name, s.wakeGrace())
	if err != nil {
		return web.AutoscalingProps{}, err
	}
	ds, err := s.Endpoints.AutoscaleDecisions(ctx, p, e.Name, 0, timelineDecisions)
	if err != nil {
		return web.AutoscalingProps{}, err
	}
	out := web.AutoscalingProps{Endpoint: e.Name, Default: a.Default, CanWrite: p.CanWrite(e.TeamID), Form: autoscalingForm(a.Policy)}
	if a.Desired != nil {
		out.Desired = strconv.Itoa(int(*a.Desired))
	}
	pol := a.Policy
	for _, t := range pol.Signals {
		out.Policy = append(out.Policy, fmt.Sprintf("%s %s per replica", t.Signal, strconv.FormatFloat(t.Target, 'f', -1, 64)))
	}
	if len(pol.Signals) == 0 {
		out.Policy = append(out.Policy, "no signals: the count stays where it is")
	}
	out.Policy = append(out.Policy, fmt.Sprintf("%d–%d replicas", pol.MinReplicas, pol.MaxReplicas),
		fmt.Sprintf("up ≤ %s×, down ≥ %s× per decision", num(pol.ScaleUpRate), num(pol.ScaleDownRate)),
		fmt.Sprintf("scale-down window %ss", num(pol.ScaleDownStabilizationS)),
		fmt.Sprintf("tolerance %s%%", num(pol.Tolerance*100)))
	if pol.TrendHorizonS > 0 {
		out.Policy = append(out.Policy, fmt.Sprintf("rate trend followed %ss ahead", num(pol.TrendHorizonS)))
	}
	if pol.MinReplicas == 0 {
		out.Policy = append(out.Policy, fmt.Sprintf("to zero after %ss without requests", num(pol.ScaleToZeroGraceS)))
	}
	for _, d := range ds {
		out.Decisions = append(out.Decisions, web.DecisionRow{At: d.At.UTC().Format(time.DateTime), Change: fmt.Sprintf("%d → %d", d.Before, d.After),
			Signal: d.Signal, Reason: d.Reason})
	}
	out.Timeline = replicaTimeline(ds, s.Clock.Now())
	return out, nil
}

func num(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

// replicaTimeline draws the replica count over the decisions (newest
// first) as two step lines in a 600 × 130 box, from the oldest decision to
// now: the count the autoscaler wanted (each change at its time) and the
// replicas ready when it decided. Nil without decisions.
func replicaTimeline(ds []endpoint.ScalingDecision, now time.Time) *web.ReplicaTimeline {
	if len(ds) == 0 {
		return nil
	}
	ds = slices.Clone(ds)
	slices.Reverse(ds)
	top := 1
	for _, d := range ds {
		top = max(top, int(d.Before), int(d.After), d.Inputs.Ready)
	}
	t0, t1 := ds[0].At, ds[len(ds)-1].At
	if now.After(t1) {
		t1 = now
	}
	if !t1.After(t0) {
		t1 = t0.Add(time.Minute)
	}
	span := t1.Sub(t0)
	x := func(t time.Time) float64 { return 600 * float64(t.Sub(t0)) / float64(span) }
	y := func(n int) float64 { return 125 - 110*float64(n)/float64(top) }
	step := func(first int, at func(endpoint.ScalingDecision) (before, after int)) string {
		pts := []string{fmt.Sprintf("0,%.1f", y(first))}
		last := first
		for _, d := range ds {
			b, a := at(d)
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(d.At), y(b)), fmt.Sprintf("%.1f,%.1f", x(d.At), y(a)))
			last = a
		}
		return strings.Join(append(pts, fmt.Sprintf("600,%.1f", y(last))), " ")
	}
	out := &web.ReplicaTimeline{Max: top,
		Wanted: step(int(ds[0].Before), func(d endpoint.ScalingDecision) (int, int) { return int(d.Before), int(d.After) }),
		Ready:  step(ds[0].Inputs.Ready, func(d endpoint.ScalingDecision) (int, int) { return d.Inputs.Ready, d.Inputs.Ready }),
	}
	for i := range 4 {
		out.Ticks = append(out.Ticks, t0.Add(span*time.Duration(i)/3).UTC().Format("2006-01-02 15:04"))
	}
	return out
}

func autoscalingForm(p autoscale.PolicyDoc) web.AutoscalingForm {
	sigs := make([]string, len(p.Signals))
	for i, t := range p.Signals {
		sigs[i] = t.Signal + "=" + num(t.Target)
	}
	return web.AutoscalingForm{Signals: strings.Join(sigs, ", "), MinReplicas: strconv.Itoa(int(p.MinReplicas)),
		MaxReplicas: strconv.Itoa(int(p.MaxReplicas)), ScaleDownS: num(p.ScaleDownStabilizationS), GraceS: num(p.ScaleToZeroGraceS)}
}

// autoscalingFormFields maps the API's field names to the form's.
var autoscalingFormFields = map[string]string{"signals": "as_signals", "min_replicas": "as_min_replicas",
	"max_replicas": "as_max_replicas", "scale_down_stabilization_s": "as_scale_down_s", "scale_to_zero_grace_s": "as_grace_s"}

// portalAutoscalingSet changes the endpoint's policy from the page's form:
// the fields the form shows, the rest as they are.
func (s *Server) portalAutoscalingSet(w http.ResponseWriter, r *http.Request) {
	e := endpointParam(r)
	name := e.Name
	ctx, p := r.Context(), pageFrame(r).user
	cur, err := s.Endpoints.Autoscaling(ctx, p, name, s.wakeGrace())
	if err != nil {
		s.portalError(w, r, err)
		return
	}
	f := web.AutoscalingForm{Signals: r.PostFormValue("as_signals"), MinReplicas: r.PostFormValue("as_min_replicas"),
		MaxReplicas: r.PostFormValue("as_max_replicas"), ScaleDownS: r.PostFormValue("as_scale_down_s"), GraceS: r.PostFormValue("as_grace_s")}
	errs := web.FieldErrors{}
	doc := cur.Policy
	doc.Signals = []autoscale.TargetDoc{}
	for part := range strings.SplitSeq(f.Signals, ",") {
		if part = strings.TrimSpace(part); part == "" {
			continue
		}
		sig, val, ok := strings.Cut(part, "=")
		target, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if !ok || err != nil {
			errs["as_signals"] = fmt.Sprintf("%q: write signal=target, such as rps=100", part)
			continue
		}
		doc.Signals = append(doc.Signals, autoscale.TargetDoc{Signal: strings.TrimSpace(sig), Target: target})
	}
	doc.MinReplicas, doc.MaxReplicas = intField(errs, r, "as_min_replicas"), intField(errs, r, "as_max_replicas")
	for field, v := range map[string]*float64{"as_scale_down_s": &doc.ScaleDownStabilizationS, "as_grace_s": &doc.ScaleToZeroGraceS} {
		n, err := strconv.ParseFloat(strings.TrimSpace(r.PostFormValue(field)), 64)
		if err != nil {
			errs[field] = "must be a number of seconds"
		}
		*v = n
	}
	status := http.StatusOK
	if len(errs) == 0 {
		if _, err := s.Endpoints.SetAutoscaling(ctx, p, name, doc, s.wakeGrace()); err != nil {
			fe, ok := fieldErrors(err)
			if !ok {
				s.portalError(w, r, err)
				return
			}
			for k, msg := range fe {
				if to, ok := autoscalingFormFields[k]; ok {
					k = to
				}
				errs[k] = msg
			}
		}
	}
	if len(errs) > 0 {
		status = http.StatusUnprocessableEntity
	} else if e, err = s.Endpoints.Get(ctx, p, name); err != nil { // the policy sets its bounds
		s.portalError(w, r, err)
		return
	}
	props, err := s.endpointProps(w, r, e)
	if err != nil {
		s.portalError(w, r, err)
		return
	}
	props.Autoscaling.Saved = status == http.StatusOK
	if status != http.StatusOK {
		props.Autoscaling.Form, props.Autoscaling.Errors = f, errs
	}
	if r.Header.Get("HX-Request") == "true" && r.Header.Get("HX-Boosted") != "true" {
		s.render(w, r, status, web.AutoscalingSection(props.Autoscaling, props.CSRF))
		return
	}
	s.render(w, r, status, web.EndpointPage(props))
}
