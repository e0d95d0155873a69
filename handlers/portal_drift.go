package handlers

import (
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"modelplane/drift"
	"modelplane/drift/stat"
	"modelplane/web"
)

// driftUnavailable is shown when there is no sample store or reading it
// failed; the page still renders.
const driftUnavailable = "prediction drift unavailable"

// driftTimeline is how far back the page charts the scheduled scores.
const driftTimeline = 24 * time.Hour

// portalDrift is an endpoint's drift page: the report for the version and
// windows in the query (the API's parameters, plus feature for the
// histogram shown), the timeline of scheduled scores and open alerts.
func (s *Server) portalDrift(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	f, e := pageFrame(r), endpointParam(r)
	p := f.user
	q := r.URL.Query()
	props := web.DriftProps{Layout: f.layout(w, e.Name+" drift", "endpoints"), Endpoint: e.Name,
		Version: q.Get("version"), Reference: q.Get("reference"), Current: q.Get("current"), Feature: q.Get("feature")}
	for _, t := range e.Traffic {
		props.Versions = append(props.Versions, t.Version)
	}
	if s.Drift == nil {
		props.Unavailable = driftUnavailable
		s.render(w, r, http.StatusOK, web.DriftPage(props))
		return
	}
	rep, err := s.Drift.Report(ctx, p, e.Name, drift.Query{Version: props.Version, Reference: props.Reference, Current: props.Current})
	switch fe, bad := fieldErrors(err); {
	case err == nil:
		props.Report = driftReportView(props, rep)
	case bad:
		var msgs []string
		for _, k := range slices.Sorted(maps.Keys(fe)) {
			msgs = append(msgs, k+": "+fe[k])
		}
		props.Error = strings.Join(msgs, "; ")
	default:
		s.Log.ErrorContext(ctx, "drift report", slog.String("error", err.Error()), slog.String("request_id", requestID(ctx)))
		props.Unavailable = driftUnavailable
	}
	scores, alerts, err := s.Drift.History(ctx, p, e.Name, s.Clock.Now().Add(-driftTimeline))
	if err != nil {
		s.Log.ErrorContext(ctx, "drift history", slog.String("error", err.Error()), slog.String("request_id", requestID(ctx)))
	}
	props.Timeline = driftTimelineCharts(scores)
	for _, a := range alerts {
		state := "pending"
		if a.FiredAt != nil {
			state = "fired " + a.FiredAt.UTC().Format(time.DateTime)
		}
		props.Alerts = append(props.Alerts, web.DriftAlertRow{Version: a.Version, Metric: a.Metric,
			Value: strconv.FormatFloat(a.Value, 'f', 3, 64), Since: a.BreachedSince.UTC().Format(time.DateTime), State: state})
	}
	s.render(w, r, http.StatusOK, web.DriftPage(props))
}

// driftReportView turns a report into the page's view: the chosen
// feature's histogram (the most drifted one when none is chosen) and the
// output's.
func driftReportView(props web.DriftProps, rep drift.Report) *web.DriftReport {
	label := func(w drift.Window) string {
		return w.Version + " " + w.From.UTC().Format(time.DateTime) + " – " + w.To.UTC().Format(time.DateTime)
	}
	v := &web.DriftReport{ReferenceLabel: label(rep.Reference), CurrentLabel: label(rep.Current), ReferenceSamples: rep.ReferenceSamples,
		CurrentSamples: rep.CurrentSamples, MinSamples: rep.MinSamples, Verdict: rep.Verdict,
		Output:          web.DriftScore{Name: rep.Output.Metric, Value: rep.Output.Value, Threshold: rep.Output.Threshold, Flagged: rep.Output.Drifting},
		OutputHistogram: histogramView("Output ("+rep.Output.Metric+")", rep.Output.Histogram)}
	chosen := -1
	for i, f := range rep.Features {
		link := url.Values{"feature": {f.Name}}
		for k, val := range map[string]string{"version": props.Version, "reference": props.Reference, "current": props.Current} {
			if val != "" {
				link.Set(k, val)
			}
		}
		v.Features = append(v.Features, web.DriftScore{Name: f.Name, Value: f.PSI, Threshold: f.Threshold, Flagged: f.Flagged,
			Link: "/endpoints/" + url.PathEscape(rep.Endpoint) + "/drift?" + link.Encode()})
		if f.Name == props.Feature || (props.Feature == "" && (chosen < 0 || f.PSI > rep.Features[chosen].PSI)) {
			chosen = i
		}
	}
	if chosen >= 0 {
		f := rep.Features[chosen]
		h := histogramView("Feature "+f.Name+" (PSI "+strconv.FormatFloat(f.PSI, 'f', 3, 64)+")", f.Histogram)
		v.FeatureHistogram = &h
	}
	return v
}

// histogramView turns counts into shares with bin labels: classes, or the
// bins' upper edges ("≤ 0.12", the last "> e").
func histogramView(title string, h drift.Histogram) web.DriftHistogram {
	out := web.DriftHistogram{Title: title, Reference: shares(h.Reference), Current: shares(h.Current)}
	if len(h.Classes) > 0 {
		out.Labels = h.Classes
		return out
	}
	for i := range h.Reference {
		switch {
		case i < len(h.Edges):
			out.Labels = append(out.Labels, "≤ "+strconv.FormatFloat(h.Edges[i], 'g', 4, 64))
		case len(h.Edges) > 0:
			out.Labels = append(out.Labels, "> "+strconv.FormatFloat(h.Edges[len(h.Edges)-1], 'g', 4, 64))
		default:
			out.Labels = append(out.Labels, "all")
		}
	}
	return out
}

func shares(counts []uint64) []float64 {
	var total uint64
	for _, n := range counts {
		total += n
	}
	out := make([]float64, len(counts))
	for i, n := range counts {
		if total > 0 {
			out[i] = float64(n) / float64(total)
		}
	}
	return out
}

// driftTimelineCharts is one chart per version: the output metric and the
// largest feature PSI at every scheduled check, oldest first.
func driftTimelineCharts(scores []drift.Score) []web.Chart {
	type point struct {
		output, psi float64
	}
	byVersion := map[string]map[time.Time]*point{}
	outputMetric := map[string]string{}
	for _, sc := range scores {
		m := byVersion[sc.Version]
		if m == nil {
			m = map[time.Time]*point{}
			byVersion[sc.Version] = m
		}
		pt := m[sc.At]
		if pt == nil {
			pt = &point{}
			m[sc.At] = pt
		}
		if strings.HasPrefix(sc.Metric, stat.MetricPSI+":") {
			pt.psi = max(pt.psi, sc.Value)
		} else {
			pt.output = sc.Value
			outputMetric[sc.Version] = sc.Metric
		}
	}
	versions := make([]string, 0, len(byVersion))
	for v := range byVersion {
		versions = append(versions, v)
	}
	sort.Strings(versions)
	var out []web.Chart
	for _, v := range versions {
		times := make([]time.Time, 0, len(byVersion[v]))
		for t := range byVersion[v] {
			times = append(times, t)
		}
		slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
		c := web.Chart{ID: "drift-" + v, Title: v, Lines: []web.ChartLine{{Label: outputMetric[v]}, {Label: "max PSI"}}}
		for _, t := range times {
			pt := byVersion[v][t]
			c.Lines[0].Values = append(c.Lines[0].Values, pt.output)
			c.Lines[1].Values = append(c.Lines[1].Values, pt.psi)
		}
		out = append(out, c)
	}
	return out
}
