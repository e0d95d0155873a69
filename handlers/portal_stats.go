package handlers

import (
	"context"
	"log/slog"
	"net/http"

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
	return out
}

// portalEndpointStats is the endpoint page's traffic section alone, which
// the page re-fetches every 5 s.
func (s *Server) portalEndpointStats(w http.ResponseWriter, r *http.Request) {
	e := endpointParam(r)
	s.render(w, r, http.StatusOK, web.StatsSection(s.statsProps(r.Context(), e.Name, e.ID)))
}
