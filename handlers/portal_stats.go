package handlers

import (
	"context"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"modelplane/reqstats"
	"modelplane/web"
)

// statsMinutes is the window the endpoint page charts, in 10-second steps.
const statsMinutes = 10

// statsUnavailable is shown when there is nothing to read statistics from,
// or reading failed; the page still renders.
const statsUnavailable = "traffic statistics unavailable"

// statsProps fills the live traffic section of an endpoint the caller has
// already been scoped to. A failed read is logged and shown as unavailable
// rather than failing the page, which polls every 5 s.
func (s *Server) statsProps(ctx context.Context, endpoint string, endpointID int64) web.StatsProps {
	p := web.StatsProps{Endpoint: endpoint, Minutes: statsMinutes}
	if s.Traffic == nil {
		p.Unavailable = statsUnavailable
		return p
	}
	w, err := s.Traffic.Last(ctx, endpoint, endpointID, statsMinutes)
	if err != nil {
		s.Log.ErrorContext(ctx, "read traffic statistics", slog.String("error", err.Error()), slog.String("request_id", requestID(ctx)))
		p.Unavailable = statsUnavailable
		return p
	}
	for _, v := range w.Versions {
		p.Versions = append(p.Versions, versionCharts(v))
	}
	x, err := s.Traffic.Explore(ctx, endpoint, endpointID, explorerMinutes)
	if err != nil {
		s.Log.ErrorContext(ctx, "read request explorer", slog.String("error", err.Error()), slog.String("request_id", requestID(ctx)))
		p.Unavailable = statsUnavailable
		return p
	}
	p.Explorer = explorerProps(x)
	return p
}

// explorerMinutes is the window of the endpoint page's request explorer.
const explorerMinutes = 60

// overheadBudgetMS is the seed's platform overhead budget at p99.
const overheadBudgetMS = 5

func msLabel(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) + " ms" }

func explorerProps(x reqstats.Explorer) *web.ExplorerProps {
	p := &web.ExplorerProps{Minutes: explorerMinutes, OverheadBudgetMS: overheadBudgetMS, OverheadRequests: x.All.Requests}
	if x.All.Requests > 0 {
		p.OverheadP99, p.OverBudget = msLabel(x.All.P99MS), x.All.P99MS > overheadBudgetMS
	}
	for _, o := range x.Overhead {
		row := web.OverheadRow{Version: o.Version, Requests: o.Requests, P50: "–", P99: "–"}
		if o.Requests > 0 {
			row.P50, row.P99 = msLabel(o.P50MS), msLabel(o.P99MS)
		}
		p.Versions = append(p.Versions, row)
	}
	rows := func(rs []reqstats.Request) []web.RequestRow {
		var out []web.RequestRow
		for _, r := range rs {
			row := web.RequestRow{At: r.At.Format("15:04:05.000"), RequestID: r.RequestID, TraceID: r.TraceID, Version: r.Version,
				Replica: r.Replica, Status: strconv.Itoa(r.Status), Latency: msLabel(r.LatencyMS), Upstream: "–", Overhead: "–"}
			if r.UpstreamMS > 0 {
				row.Upstream, row.Overhead = msLabel(r.UpstreamMS), msLabel(r.OverheadMS)
			}
			out = append(out, row)
		}
		return out
	}
	p.Slowest, p.Failed, p.Sampled = rows(x.Slowest), rows(x.Failed), rows(x.Sampled)
	return p
}

// versionCharts are QPS, latency and error rate for every version, and
// TTFT and TPOT for one that streams.
func versionCharts(v reqstats.Series) web.VersionStats {
	n := len(v.Points)
	col := func(f func(reqstats.Point) float64) []float64 {
		out := make([]float64, n)
		for i, p := range v.Points {
			out[i] = f(p)
		}
		return out
	}
	pair := func(id, title string, p50, p99 func(reqstats.Point) float64) web.Chart {
		return web.Chart{ID: id, Title: title, Unit: "ms", Lines: []web.ChartLine{{Label: "p50", Values: col(p50)}, {Label: "p99", Values: col(p99)}}}
	}
	out := web.VersionStats{Version: v.Version, Charts: []web.Chart{
		{ID: "qps", Title: "Requests per second", Unit: "req/s", Lines: []web.ChartLine{{Label: "QPS", Values: col(func(p reqstats.Point) float64 { return p.QPS })}}},
		pair("latency", "Latency", func(p reqstats.Point) float64 { return p.P50MS }, func(p reqstats.Point) float64 { return p.P99MS }),
		{ID: "errors", Title: "Error rate", Unit: "%", Lines: []web.ChartLine{{Label: "errors", Values: col(func(p reqstats.Point) float64 { return p.ErrorRate * 100 })}}},
	}}
	if v.Streaming {
		out.Charts = append(out.Charts,
			pair("ttft", "Time to first token", func(p reqstats.Point) float64 { return p.TTFTP50MS }, func(p reqstats.Point) float64 { return p.TTFTP99MS }),
			pair("tpot", "Time per output token", func(p reqstats.Point) float64 { return p.TPOTP50MS }, func(p reqstats.Point) float64 { return p.TPOTP99MS }))
	}
	if n > 0 {
		from, to := chartTime(v.Points[0].Start, v.Points[n-1].Start)
		for i := range out.Charts {
			out.Charts[i].From, out.Charts[i].To = from, to
		}
	}
	return out
}

// chartTime writes a chart's first and last times for its axis: the time
// of day when both fall on one UTC day, else dates and times.
func chartTime(from, to time.Time) (string, string) {
	from, to = from.UTC(), to.UTC()
	layout := "15:04 UTC"
	if from.Truncate(24*time.Hour) != to.Truncate(24*time.Hour) {
		layout = "Jan 2 15:04 UTC"
	}
	return from.Format(layout), to.Format(layout)
}

// portalEndpointStats is the endpoint page's traffic section alone, which
// the page re-fetches every 5 s.
func (s *Server) portalEndpointStats(w http.ResponseWriter, r *http.Request) {
	e := endpointParam(r)
	s.render(w, r, http.StatusOK, web.StatsSection(s.statsProps(r.Context(), e.Name, e.ID)))
}
