package autoscale

import (
	"fmt"
	"time"
)

// Short-term trend (Policy.TrendHorizon): a line fitted to a rate signal's
// load over the last TrendWindow says where the load is heading. A rising
// line projected over the horizon (the cold start) scales up before the
// climb arrives, since a replica asked for now serves only a cold start
// later; a falling one lets a mean scale-down basis follow the fall by the
// line's level now instead of the window's mean, half a window late. Only rate signals have a trend worth
// following: a backlog or a level (in flight, KV use) changes with the
// count itself.

// TrendWindow is how much history a trend is fitted to; a trend needs
// half of it before it is used.
const TrendWindow = 2 * time.Minute

// MaxTrendHorizon is the longest trend horizon a policy may set: a line
// fitted to two minutes says little about what comes ten minutes later.
const MaxTrendHorizon = 10 * time.Minute

// rate reports whether s counts work arriving per second, whose trend says
// where the load is heading.
func (s Signal) rate() bool { return s == RPS || s == TokensPerSecond || s == PromptTokensPerSecond }

// fitLine fits the least-squares line x = level + slope × (t − now) to pts
// and returns its level at now and its slope per second; ok is false with
// fewer than three points or all at one instant.
func fitLine(pts []loadAt, now int64) (level, slope float64, ok bool) {
	if len(pts) < 3 {
		return 0, 0, false
	}
	n := float64(len(pts))
	var st, sx float64
	for _, p := range pts {
		st += float64(p.at-now) / 1e9
		sx += p.x
	}
	mt, mx := st/n, sx/n
	var stt, stx float64
	for _, p := range pts {
		dt := float64(p.at-now)/1e9 - mt
		stt += dt * dt
		stx += dt * (p.x - mx)
	}
	if stt == 0 {
		return 0, 0, false
	}
	slope = stx / stt
	return mx - slope*mt, slope, true
}

// trend records signal k's load x at now, forgets what is TrendWindow or
// more old, and fits a line to the rest; ok is false until the history
// spans half the window.
func (s *State) trend(k int, now int64, x float64) (level, slope float64, ok bool) {
	pts := s.trends[k]
	i := 0
	for i < len(pts) && now-pts[i].at >= int64(TrendWindow) {
		i++
	}
	if i > 0 {
		pts = append(pts[:0], pts[i:]...)
	}
	pts = append(pts, loadAt{now, x})
	s.trends[k] = pts
	if time.Duration(now-pts[0].at) < TrendWindow/2 {
		return 0, 0, false
	}
	return fitLine(pts, now)
}

// followTrend is the load a rate signal's desire follows under p's trend
// horizon, given the load it measures now, and r's Trend and Forecast set:
// a rising trend's projection over the horizon when above the load, at
// most the load plus the tolerance (a step read as a slope would ask for
// many times what it needs; panic handles steps). fall is the line's
// level now when it falls, else 0.
func (s *State) followTrend(p *Policy, r *Reading, now int64, load float64) (follow, fall float64) {
	level, slope, ok := s.trend(r.Signal.index(), now, load)
	if !ok {
		return load, 0
	}
	h := p.TrendHorizon.Seconds()
	r.Trend = slope * 60
	if f := min(level+slope*h, load*(1+p.Tolerance)); slope > 0 && f > load {
		r.Forecast = f
		return f, 0
	}
	if slope < 0 && level > 0 {
		return load, level
	}
	return load, 0
}

// trendNote is the reason's note for a desire that follows a rising trend.
func trendNote(r Reading, h time.Duration) string {
	return fmt.Sprintf(" (trend +%s/min: %s in %s)", num(r.Trend), num(r.Forecast), h)
}
