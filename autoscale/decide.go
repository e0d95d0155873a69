package autoscale

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// MissingEvaluations is how many evaluations in a row a configured signal
// may be absent from every ready replica before the endpoint freezes.
const MissingEvaluations = 3

// Input is what one evaluation sees of an endpoint (of one version).
type Input struct {
	// Now is the evaluation's time.
	Now time.Time
	// Current is the replica count the endpoint is set to: the ready
	// replicas and those still starting or waiting for a place.
	Current int
	// Ready holds one Sample per ready replica. Starting replicas have no
	// Sample: they are capacity, not load.
	Ready []Sample
	// Wake is true when a request is waiting for a replica of an endpoint
	// at zero (a gateway's wake since the last evaluation).
	Wake bool
	// LastRequest is when a gateway last saw a request for the endpoint;
	// zero when none was seen.
	LastRequest time.Time
	// Forecast is the predicted request rate for a policy whose predictive
	// mode is advisory or on (nil: none asked for; see Forecast).
	Forecast *Prediction
}

// Reading is one configured signal at one evaluation.
type Reading struct {
	Signal Signal  `json:"signal"`
	Target float64 `json:"target"`
	// Value is the per-replica mean over the ready replicas that reported
	// the signal (Replicas of them; 0 is missing).
	Value    float64 `json:"value"`
	Replicas int     `json:"replicas"`
	// Desired is ceil(ready × Value / Target), 0 when missing; for a
	// backlog signal while replicas start, at most the current count
	// (Held).
	Desired int  `json:"desired"`
	Held    bool `json:"held,omitempty"`
	// Trend is a rate signal's load trend in replicas per minute (policy
	// trend horizon above 0, two minutes of history); Forecast, when the
	// trend rises, the load projected over the horizon, which Desired then
	// follows (see Policy.TrendHorizon).
	Trend    float64 `json:"trend,omitempty"`
	Forecast float64 `json:"forecast,omitempty"`
}

// Decision is one evaluation's result with everything it was decided from.
type Decision struct {
	At time.Time `json:"at"`
	// Current is the count before, Ready and Starting how it was made up.
	Current  int `json:"current"`
	Ready    int `json:"ready"`
	Starting int `json:"starting"`
	// Desired is the count to run; Changed is Desired != Current.
	Desired int  `json:"desired"`
	Changed bool `json:"changed"`
	// Signal is the signal whose desire won (empty when none decided) and
	// Recommended its desire after the tolerance band, clamped to min/max:
	// what the stabilisation windows recorded.
	Signal      Signal `json:"signal,omitempty"`
	Recommended int    `json:"recommended"`
	// Reason says why, for people: "kv_cache 0.93/0.85 → 7 → 8".
	Reason   string    `json:"reason"`
	Readings []Reading `json:"readings,omitempty"`
	// Panic is true while panic mode lasts; Frozen while a signal is
	// missing past MissingEvaluations.
	Panic  bool `json:"panic,omitempty"`
	Frozen bool `json:"frozen,omitempty"`
	// Event is set on the evaluation a freeze starts or ends, for the
	// caller to raise.
	Event string `json:"event,omitempty"`
	// Predicted is the count the forecast asks for (predictive advisory or
	// on; 0 without a forecast), Forecast the forecast it came from.
	// Predictive mode on raises Desired to it, never lowers it; advisory
	// only says so in Reason.
	Predicted int         `json:"predicted,omitempty"`
	Forecast  *Prediction `json:"forecast,omitempty"`
}

// State is what an endpoint remembers between evaluations. The zero State
// is an endpoint never evaluated; the caller keeps one per endpoint and
// passes it to every Decide (and starts from zero again when the policy
// changes).
type State struct {
	up, down   window
	panicUntil int64 // unix nanoseconds; panic mode lasts until then
	missing    [signalCount]uint8
	backlog    [signalCount]float64 // a backlog signal's mean at the last evaluation
	frozen     bool
	active     int64 // unix nanoseconds of the last request or activity seen
	// first is the first evaluation: for a scale-down window after it
	// nothing scales down (to a count above zero), since the windows of
	// whoever decided before (a leader that stopped, the policy before a
	// change, nobody at a simulation's start) are not in this state, and a
	// reading of one moment must not take replicas away.
	first int64
	// loads are the winning loads of the scale-down window, for
	// ScaleDownMean only; lastUp is when the count last rose (0: never).
	loads  []loadAt
	lastUp int64
	// trends are the rate signals' loads over the last TrendWindow, for
	// a policy with a trend horizon.
	trends [signalCount][]loadAt
}

type loadAt struct {
	at int64
	x  float64
}

// Decide evaluates the endpoint once under p and updates s.
func (s *State) Decide(p *Policy, in Input) Decision {
	now := in.Now.UnixNano()
	d := Decision{At: in.Now, Current: in.Current, Ready: len(in.Ready), Starting: max(0, in.Current-len(in.Ready))}
	if s.first == 0 {
		s.first = now
	}
	if s.active == 0 {
		s.active = now // the idle clock starts at the first evaluation
	}
	if !in.LastRequest.IsZero() {
		s.active = max(s.active, in.LastRequest.UnixNano())
	}
	if in.Wake {
		s.active = now
	}
	if in.Current <= 0 {
		return s.atZero(p, d, in.Wake)
	}
	floor := max(p.MinReplicas, 1)
	current := in.Current

	// Per signal: the per-replica mean over the ready replicas reporting
	// it; its desire is the load it measures, ready × mean, in replicas.
	d.Readings = make([]Reading, len(p.Signals))
	// raw is the largest load measured, forecasts left out: what panic
	// is judged on. falling is each signal's load now by its trend when
	// that trend falls, else 0.
	best, bestLoad, raw := -1, 0.0, 0.0
	falling := make([]float64, len(p.Signals))
	var missing []Signal
	for i, t := range p.Signals {
		r := Reading{Signal: t.Signal, Target: t.Target}
		sum := 0.0
		for _, m := range in.Ready {
			if v, ok := m.Value(t.Signal); ok {
				sum += v
				r.Replicas++
			}
		}
		if r.Replicas > 0 {
			r.Value = sum / float64(r.Replicas)
			load := float64(len(in.Ready)) * r.Value / t.Target
			// A backlog stays on the replicas it queued on: while a large
			// scale-up starts it keeps growing and asks again for capacity
			// already on its way (burst: 4 → 11, then 28 where 11 serve),
			// and once the replicas are ready it drains slowly while its
			// mean still reads as overload (noise: 11 → 35). It raises the
			// count only while it grows and the replicas starting are
			// fewer than half the ready ones (a climb adds one at a time
			// and still needs the queue); otherwise it may hold the count.
			// Rate signals still scale up meanwhile.
			if t.Signal.backlog() {
				k := t.Signal.index()
				growing := r.Value > s.backlog[k]
				s.backlog[k] = r.Value
				if (2*d.Starting >= len(in.Ready) || !growing) && load > float64(current) {
					load, r.Held = float64(current), true
				}
			}
			raw = max(raw, load)
			if p.TrendHorizon > 0 && t.Signal.rate() {
				load, falling[i] = s.followTrend(p, &r, now, load)
			}
			r.Desired = ceil(load)
			if best < 0 || load > bestLoad {
				best, bestLoad = i, load
			}
		}
		// A signal no ready replica reports is missing; without a ready
		// replica nothing is (starting replicas report nothing).
		if k := t.Signal.index(); k >= 0 && len(in.Ready) > 0 {
			if r.Replicas == 0 {
				missing = append(missing, t.Signal)
				s.missing[k] = min(s.missing[k]+1, math.MaxUint8)
			} else {
				s.missing[k] = 0
			}
		}
		d.Readings[i] = r
	}
	s.noteActivity(in.Ready, now)
	var gone []string
	var goneSignals []Signal
	for _, sig := range missing {
		if s.missing[sig.index()] >= MissingEvaluations {
			gone = append(gone, string(sig))
			goneSignals = append(goneSignals, sig)
		}
	}
	if len(gone) > 0 {
		why := fmt.Sprintf("%s missing from every ready replica for %d evaluations", strings.Join(gone, ", "), MissingEvaluations)
		if detail := missingWhy(in.Ready, goneSignals); detail != "" {
			why += " (" + detail + ")"
		}
		if !s.frozen {
			d.Event = "autoscaling frozen: " + why
		}
		s.frozen = true
		d.Frozen, d.Desired, d.Recommended = true, current, current
		d.Reason = "frozen: " + why + fmt.Sprintf(": hold %d", current)
		return d
	}
	if s.frozen {
		s.frozen = false
		d.Event = "autoscaling resumed: every configured signal reported again"
	}
	if len(in.Ready) == 0 {
		d.Desired = clamp(current, floor, p.MaxReplicas)
		d.Recommended = d.Desired
		d.Reason = fmt.Sprintf("no ready replica (%d starting): hold %d", d.Starting, d.Desired)
		return s.finish(d)
	}

	// The recommendation: the winning desire, or the current count inside
	// the tolerance band or without any signal.
	rec, label := current, ""
	inBand := false
	if best >= 0 {
		r := d.Readings[best]
		d.Signal = r.Signal
		label = fmt.Sprintf("%s %s/%s", r.Signal, num(r.Value), num(r.Target))
		if r.Held {
			label += fmt.Sprintf(" (backlog held: %d starting, %d ready, or not growing)", d.Starting, len(in.Ready))
		}
		if r.Forecast > 0 {
			label += trendNote(r, p.TrendHorizon)
		}
		if math.Abs(bestLoad/float64(current)-1) <= p.Tolerance {
			inBand = true
		} else {
			rec = r.Desired
		}
		if raw >= p.PanicThreshold*float64(current) {
			s.panicUntil = now + int64(p.ScaleDownStabilization)
			if s.panicUntil == now {
				s.panicUntil++ // a zero window still holds this evaluation
			}
		}
	} else if len(p.Signals) == 0 {
		label = "no signals configured"
	} else {
		label = "no signal reported"
	}
	clamped := ""
	switch {
	case rec > p.MaxReplicas:
		clamped = fmt.Sprintf("max %d", p.MaxReplicas)
	case rec < floor:
		clamped = fmt.Sprintf("min %d", floor)
	}
	rec = clamp(rec, floor, p.MaxReplicas)
	d.Recommended = rec
	d.Panic = now < s.panicUntil

	// Stabilisation: up to the lowest desire of the scale-up window, down to
	// the highest of the scale-down window (each includes this one).
	upLow := s.up.push(now, rec, p.ScaleUpStabilization, false)
	downHigh := s.down.push(now, rec, p.ScaleDownStabilization, true)
	downWhat := "" // what holds a scale-down, for the reason; "": the window
	if p.ScaleDownBasis == ScaleDownMean && best >= 0 {
		downHigh, downWhat = s.downToMean(p, now, bestLoad, falling[best], current, rec, floor)
	}
	result := current
	var notes []string
	switch {
	case current < upLow:
		result = upLow
		if upLow < rec {
			notes = append(notes, fmt.Sprintf("up window %s holds %d", p.ScaleUpStabilization, upLow))
		}
	case current > downHigh:
		result = downHigh
		if downHigh > rec {
			notes = append(notes, downHolds(p, downWhat, downHigh))
		}
	case rec > current:
		notes = append(notes, fmt.Sprintf("up window %s holds %d", p.ScaleUpStabilization, upLow))
	case rec < current:
		notes = append(notes, downHolds(p, downWhat, downHigh))
	}
	if d.Panic && rec > result {
		result, notes = rec, nil // panic scales up at once, past the up window
	}
	if result < current {
		switch {
		case d.Panic:
			result, notes = current, []string{fmt.Sprintf("panic: no scale-down until %s", time.Unix(0, s.panicUntil).UTC().Format(time.RFC3339))}
		case len(missing) > 0:
			result, notes = current, []string{fmt.Sprintf("%s missing: no scale-down", joinSignals(missing))}
		case now-s.first < int64(p.ScaleDownStabilization):
			result, notes = current, []string{fmt.Sprintf("deciding for %s: no scale-down within the first window %s",
				time.Duration(now-s.first), p.ScaleDownStabilization)}
		}
	}

	// Rate caps, then min/max.
	// A panic scale-up is not capped: a burst gets its full desire in one
	// decision (Knative's panic mode; docs/decisions.md). max still holds.
	if result > current && !d.Panic {
		if limit := ceil(float64(current) * p.ScaleUpRate); result > limit {
			result = limit
			notes = append(notes, fmt.Sprintf("cap %s×", num(p.ScaleUpRate)))
		}
	} else if result < current {
		if limit := max(ceil(float64(current)*p.ScaleDownRate), 1); result < limit {
			result = limit
			notes = append(notes, fmt.Sprintf("cap %s×", num(p.ScaleDownRate)))
		}
	}
	if result > p.MaxReplicas {
		result = p.MaxReplicas
		clamped = fmt.Sprintf("max %d", p.MaxReplicas)
	} else if result < floor {
		result = floor
		clamped = fmt.Sprintf("min %d", floor)
	}
	if clamped != "" && (result == p.MaxReplicas || result == floor) && result != current {
		notes = append(notes, clamped)
	}
	if inBand && result == current {
		notes = append(notes, fmt.Sprintf("within tolerance %s%%", num(p.Tolerance*100)))
	}
	// Predictive pre-scaling raises (on) or would raise (advisory) the
	// count to what the forecast needs; it never lowers it.
	if p.Predictive == PredictiveOn || p.Predictive == PredictiveAdvisory {
		note := ""
		if in.Forecast == nil {
			note = "predictive: no forecast given"
		} else {
			d.Forecast = in.Forecast
			n, why := predicted(p, in.Forecast, in.Ready, rec)
			n = min(n, p.MaxReplicas)
			d.Predicted = n
			switch {
			case why != "":
				note = "predictive: " + why
			case p.Predictive == PredictiveAdvisory:
				note = fmt.Sprintf("predictive would have asked %d (forecast %s req/s)", n, num(in.Forecast.RPS))
			case n > result:
				result = n
				note = fmt.Sprintf("predictive: forecast %s req/s asks %d", num(in.Forecast.RPS), n)
			}
		}
		if note != "" {
			notes = append(notes, note)
		}
	}
	if result > current {
		s.lastUp = now
	}
	d.Desired = result
	d.Reason = fmt.Sprintf("%s → %d → %d", label, current, result)
	if d.Panic && result > current {
		d.Reason = "panic: " + d.Reason
	}
	if len(notes) > 0 {
		d.Reason += " (" + strings.Join(notes, "; ") + ")"
	}

	// Scale to zero: min_replicas 0 and no request for the grace period.
	if p.MinReplicas == 0 && !d.Panic && len(missing) == 0 {
		if idle := time.Duration(now - s.active); idle >= p.ScaleToZeroGrace {
			d.Desired = 0
			d.Reason = fmt.Sprintf("no request for %s (grace %s) → %d → 0", idle, p.ScaleToZeroGrace, current)
		}
	}
	return s.finish(d)
}

// downHolds is the note of a scale-down held at n by what (the window's
// highest recommendation when "").
func downHolds(p *Policy, what string, n int) string {
	if what == "" {
		what = fmt.Sprintf("down window %s", p.ScaleDownStabilization)
	}
	return fmt.Sprintf("%s holds %d", what, n)
}

// downToMean is the lowest count a ScaleDownMean policy may scale down to
// at now, and what holds it, for the reason: the mean winning load over the
// scale-down window with the tolerance added, when that is below the count
// by more than the tolerance, no sooner than a window after the last
// scale-up, and never below this evaluation's recommendation rec. A load
// falling by its trend (fall above 0, its level now) is followed at once:
// the trend's level stands for the window's mean, which lags it by half
// a window.
func (s *State) downToMean(p *Policy, now int64, x, fall float64, current, rec, floor int) (int, string) {
	i := 0
	for i < len(s.loads) && now-s.loads[i].at >= int64(p.ScaleDownStabilization) {
		i++
	}
	if i > 0 {
		s.loads = append(s.loads[:0], s.loads[i:]...)
	}
	s.loads = append(s.loads, loadAt{now, x})
	sum := 0.0
	for _, l := range s.loads {
		sum += l.x
	}
	mean := sum / float64(len(s.loads))
	what := fmt.Sprintf("mean load %s over %s", num(mean), p.ScaleDownStabilization)
	if fall > 0 {
		mean = fall
		what = fmt.Sprintf("falling load %s by its trend", num(mean))
	}
	if s.lastUp != 0 && now-s.lastUp < int64(p.ScaleDownStabilization) {
		return current, fmt.Sprintf("scaled up %s ago, down window %s", time.Duration(now-s.lastUp), p.ScaleDownStabilization)
	}
	to := current
	if m := mean * (1 + p.Tolerance); m < float64(current)*(1-p.Tolerance) {
		to = clamp(ceil(m), floor, p.MaxReplicas)
	}
	return max(to, rec), what
}

// atZero decides for an endpoint at zero replicas: no replica reports
// anything, so only a wake (or a minimum above zero) starts one, and the
// missing-signal rule does not apply. Windows start afresh on waking.
func (s *State) atZero(p *Policy, d Decision, wake bool) Decision {
	active := s.active
	*s = State{active: active}
	switch {
	case p.MinReplicas > 0:
		d.Desired = min(p.MinReplicas, p.MaxReplicas)
		d.Reason = fmt.Sprintf("min_replicas %d → 0 → %d", p.MinReplicas, d.Desired)
	case wake:
		d.Desired = 1
		d.Reason = "wake: a request is waiting → 0 → 1"
	default:
		d.Reason = "at zero, no request waiting: hold 0"
	}
	d.Recommended = d.Desired
	return s.finish(d)
}

func (s *State) finish(d Decision) Decision {
	d.Changed = d.Desired != d.Current
	return d
}

// noteActivity counts work on a ready replica (requests per second, in
// flight or queued) as activity, so an endpoint is never taken to zero
// while it serves, whatever the gateways' last-request time says.
func (s *State) noteActivity(ready []Sample, now int64) {
	for _, m := range ready {
		for _, sig := range [...]Signal{RPS, InFlight, QueueDepth} {
			if v, ok := m.Value(sig); ok && v > 0 {
				s.active = now
				return
			}
		}
	}
}

// window is a stabilisation window: the recommendations of its last span,
// kept as a monotonic queue, so that its highest (or lowest) is the front
// and the queue holds only those that can still become it.
type window struct{ q []entry }

type entry struct {
	at int64
	n  int
}

// push records n at now, forgets what is span or more old (n itself stays),
// and returns the highest recommendation in the window when high, else the
// lowest.
func (w *window) push(now int64, n int, span time.Duration, high bool) int {
	i := 0
	for i < len(w.q) && now-w.q[i].at >= int64(span) {
		i++
	}
	if i > 0 {
		w.q = append(w.q[:0], w.q[i:]...)
	}
	for len(w.q) > 0 {
		last := w.q[len(w.q)-1].n
		if high && last > n || !high && last < n {
			break
		}
		w.q = w.q[:len(w.q)-1]
	}
	w.q = append(w.q, entry{now, n})
	return w.q[0].n
}

// ceil is the smallest whole count at or above x, forgiving the float
// error of a product that should be whole (5 × 0.8/0.8 is 5, not 6).
func ceil(x float64) int {
	if x > math.MaxInt32 {
		return math.MaxInt32
	}
	return int(math.Ceil(x - 1e-9))
}

func clamp(n, lo, hi int) int { return max(lo, min(n, hi)) }

func joinSignals(s []Signal) string {
	names := make([]string, len(s))
	for i, x := range s {
		names[i] = string(x)
	}
	return strings.Join(names, ", ")
}

// num formats a signal's value for a reason: whole numbers as they are,
// others with two decimals below 10, one below 100, none above.
func num(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
	prec := 2
	switch a := math.Abs(v); {
	case a >= 100:
		prec = 0
	case a >= 10:
		prec = 1
	}
	s := strconv.FormatFloat(v, 'f', prec, 64)
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	return s
}

// maxWhy is how many replicas' reasons a freeze names.
const maxWhy = 3

// missingWhy is why the ready replicas did not report the signals, as
// their Samples say (Sample.Missing): the distinct reasons, the first
// maxWhy of them and how many more; "" when none says.
func missingWhy(ready []Sample, sigs []Signal) string {
	var whys []string
	seen := map[string]bool{}
	for _, sig := range sigs {
		i := sig.index()
		for _, m := range ready {
			if w := m.why[i]; w != "" && !seen[w] {
				seen[w] = true
				whys = append(whys, w)
			}
		}
	}
	if len(whys) > maxWhy {
		return strings.Join(whys[:maxWhy], "; ") + fmt.Sprintf("; and %d more", len(whys)-maxWhy)
	}
	return strings.Join(whys, "; ")
}
