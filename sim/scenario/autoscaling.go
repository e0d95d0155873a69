package scenario

import (
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"modelplane/autoscale"
	"modelplane/engine"
	"modelplane/sim"
)

// Autoscale makes one LLM version of a scenario scale in virtual time by
// package autoscale, the decision the control plane runs. Replicas heartbeat
// their metrics every Heartbeat; every Interval the version's
// autoscale.State decides from the ready replicas' latest samples; a
// replica added starts for ColdStart (capacity, not load, meanwhile) and a
// replica removed drains: no new requests, gone when its last finishes.
type Autoscale struct {
	// Version is the scaled version's name; its gpus are the replicas at 0.
	Version string
	// Policy is the version's autoscaling policy (autoscale.Policy).
	Policy autoscale.Policy
	// Interval is the time between evaluations (2 to 5 s); Heartbeat the
	// time between replica heartbeats; RateWindow how far back a heartbeat's
	// requests/s and tokens/s look: the built-ins take the control plane's
	// own, autoscale.RateWindow, which its loop measures requests/s over.
	Interval, Heartbeat, RateWindow time.Duration
	// ColdStart is how long an added replica takes to become ready: the
	// version's measured or profiled start time.
	ColdStart time.Duration
	// Load shapes the arrival rate: Arrivals.Rate times the multiplier,
	// piecewise linear between the points (before the first and after the
	// last, their multipliers). Empty: a constant rate.
	Load []LoadPoint
	// Noise, above 0, multiplies the rate by a factor drawn uniformly in
	// [1 − Noise, 1 + Noise], redrawn every NoisePeriod.
	Noise       float64
	NoisePeriod time.Duration
	// Steps are the instants the load steps up; the report times the
	// scale-up that follows each.
	Steps []time.Duration
	// SLA is what each minute's requests are judged against.
	SLA SLA
	// History, for a predictive policy, is the hourly request history
	// before the run, and Clock maps virtual time onto its calendar.
	History autoscale.History
	Clock   Clock
	// Horizon is how far ahead the forecast looks on the calendar before
	// the cold start is added (autoscale.DefaultHorizon when 0).
	Horizon time.Duration
	// ComparePredictive runs the scenario a second time with predictive
	// mode off, for contrast.
	ComparePredictive bool
}

// LoadPoint is the load multiplier at one instant.
type LoadPoint struct {
	At   time.Duration
	Mult float64
}

// SLA is a per-minute service level: p99 TTFT and p99 TPOT ceilings.
type SLA struct {
	TTFTP99, TPOTP99 time.Duration
}

// Clock maps virtual time onto a calendar: virtual t is Start + t ×
// Compression (a day of 24 hours compressed into 2 is Compression 12).
type Clock struct {
	Start       time.Time
	Compression float64
}

// At is the calendar time of virtual time t.
func (c Clock) At(t time.Duration) time.Time {
	return c.Start.Add(time.Duration(float64(t) * max(c.Compression, 1)))
}

func (a *Autoscale) validate(sc Scenario) error {
	bad := func(path, format string, args ...any) error {
		return fmt.Errorf("%w: autoscale.%s: %s", ErrInvalidScenario, path, fmt.Sprintf(format, args...))
	}
	vi := slices.IndexFunc(sc.Versions, func(v Version) bool { return v.Name == a.Version })
	switch {
	case vi < 0:
		return bad("version", "no version %q", a.Version)
	case isClassic(sc.Versions[vi].Profile):
		return bad("version", "%s is not an LLM version", a.Version)
	case len(sc.Versions) != 1:
		return bad("version", "an autoscaled scenario has one version, got %d", len(sc.Versions))
	case sc.Rollout != nil:
		return bad("version", "an autoscaled scenario has no rollout")
	case a.Interval < time.Second || a.Interval > time.Minute:
		return bad("interval", "want 1 s to 1 m, got %s", a.Interval)
	case a.Heartbeat < 100*time.Millisecond || a.Heartbeat > a.Interval:
		return bad("heartbeat", "want 100 ms up to the interval, got %s", a.Heartbeat)
	case a.RateWindow < a.Heartbeat:
		return bad("rate_window", "want at least the heartbeat, got %s", a.RateWindow)
	case a.ColdStart < 0:
		return bad("cold_start", "want 0 or more, got %s", a.ColdStart)
	case !(a.Noise >= 0 && a.Noise < 1) || (a.Noise > 0 && a.NoisePeriod <= 0):
		return bad("noise", "want a share below 1 with a positive period, got %v every %s", a.Noise, a.NoisePeriod)
	case a.SLA.TTFTP99 <= 0 || a.SLA.TPOTP99 <= 0:
		return bad("sla", "want positive TTFT and TPOT ceilings")
	}
	for i, p := range a.Load {
		if !(p.Mult >= 0) || math.IsInf(p.Mult, 0) || (i > 0 && p.At <= a.Load[i-1].At) {
			return bad(fmt.Sprintf("load[%d]", i), "want increasing times and multipliers of 0 or more")
		}
	}
	if err := a.Policy.Validate(autoscale.TaskLLM, true); err != nil {
		return fmt.Errorf("%w: autoscale.policy: %w", ErrInvalidScenario, err)
	}
	if a.Policy.Predictive != autoscale.PredictiveOff && a.Clock.Start.IsZero() {
		return bad("clock", "a predictive policy needs a calendar for its history")
	}
	return nil
}

// mult is the load multiplier at t, noise left out.
func (a *Autoscale) mult(t time.Duration) float64 {
	l := a.Load
	switch {
	case len(l) == 0:
		return 1
	case t <= l[0].At:
		return l[0].Mult
	case t >= l[len(l)-1].At:
		return l[len(l)-1].Mult
	}
	i, _ := slices.BinarySearchFunc(l, t, func(p LoadPoint, t time.Duration) int { return int(p.At - t) })
	p, q := l[i-1], l[i]
	return p.Mult + (q.Mult-p.Mult)*float64(t-p.At)/float64(q.At-p.At)
}

// peakMult is the highest multiplier the load reaches, noise included.
func (a *Autoscale) peakMult() float64 {
	m := 1.0
	if len(a.Load) > 0 {
		m = 0
		for _, p := range a.Load {
			m = max(m, p.Mult)
		}
	}
	return m * (1 + a.Noise)
}

// autoscaleRun is the autoscaling state of one run.
type autoscaleRun struct {
	cfg      *Autoscale
	vi       int
	state    autoscale.State
	capacity float64 // measured requests/s one replica serves

	nextHB, nextEval time.Duration
	noise            []float64 // multiplier of each noise period
	slots            int       // heartbeats in a rate window

	starting []startingReplica
	draining []int
	gone     int

	gpuSeconds float64 // replicas up (starting, ready, draining) over [0, duration)
	minutes    []minuteStats
	decisions  []DecisionReport
	lastDir    int
	reversals  int
	scaleUps   map[autoscale.Signal]int
	maxKV      float64 // highest fleet mean KV use at a heartbeat
	kvSum      float64 // fleet mean KV use summed over heartbeats
	kvN        int
	maxUp      int // most replicas up at once
	predicted  int // most replicas a forecast asked for

	onDecision func(autoscale.Decision) // every decision (tests)
}

type startingReplica struct {
	rep     int
	readyAt time.Duration
}

type minuteStats struct {
	arrivals   int
	ttft, tpot []time.Duration
	replicaSec float64
}

// replicaMetrics is what an autoscaled replica keeps for its heartbeats.
type replicaMetrics struct {
	arrivals, tokens, prompt int   // since the last heartbeat
	ring                     []int // requests, tokens and prompt tokens per heartbeat, rate window
	head, filled             int
	draining                 bool
}

func newAutoscaleRun(f *fleet) *autoscaleRun {
	a := f.sc.Autoscale
	vi := slices.IndexFunc(f.sc.Versions, func(v Version) bool { return v.Name == a.Version })
	r := &autoscaleRun{cfg: a, vi: vi, nextHB: a.Heartbeat, nextEval: a.Interval,
		slots: max(1, int(a.RateWindow/a.Heartbeat)), scaleUps: map[autoscale.Signal]int{},
		capacity: measureCapacity(f.sc, vi)}
	if a.Noise > 0 {
		nr := newRand(f.sc.Seed, streamNoise)
		for range int(f.sc.Duration/a.NoisePeriod) + 1 {
			r.noise = append(r.noise, 1+a.Noise*(2*nr.Float64()-1))
		}
	}
	r.minutes = make([]minuteStats, int((f.sc.Duration+time.Minute-1)/time.Minute))
	for _, i := range f.byVersion[vi] {
		f.reps[i].m = r.newMetrics()
	}
	r.maxUp = len(f.byVersion[vi])
	return r
}

// metricsStride is the ints a heartbeat takes in replicaMetrics.ring.
const metricsStride = 3

func (r *autoscaleRun) newMetrics() *replicaMetrics {
	return &replicaMetrics{ring: make([]int, metricsStride*r.slots)}
}

// rate is the arrival rate at t.
func (r *autoscaleRun) rate(base float64, t time.Duration) float64 {
	x := base * r.cfg.mult(t)
	if len(r.noise) > 0 {
		x *= r.noise[min(int(t/r.cfg.NoisePeriod), len(r.noise)-1)]
	}
	return x
}

// measureCapacity is what one replica of version vi serves with
// capacityRequests requests of the scenario's mix queued at once: the
// per-replica capacity the oracle divides by.
//
// The figure depends only on the profile, the length mix and the seed, and
// is kept for the process (tests and comparisons run the same mix often).
func measureCapacity(sc Scenario, vi int) float64 {
	key := fmt.Sprintf("%+v|%+v|%d|%d", sc.Versions[vi].Profile, sc.PromptTokens, sc.MaxTokens, sc.Seed)
	if sc.OutputTokens != nil {
		key += fmt.Sprintf("|%+v", *sc.OutputTokens)
	}
	if v, ok := capacities.Load(key); ok {
		return v.(float64)
	}
	c := runCapacity(sc, vi)
	capacities.Store(key, c)
	return c
}

var capacities sync.Map // measureCapacity's figures by profile, mix and seed

// capacityRequests is how many requests measureCapacity queues. A run
// serves hundreds of thousands of its mix, so the capacity is the mix's,
// not a sample's: with 1,000 the seed day's capacity went from 4.65 to
// 4.89 req/s by seed (the sample's mean lengths, and the last batch's
// drain, 1 to 2 % of the run), and the oracle with it; with 20,000 it is
// 4.86 to 4.93 at seeds 1 to 9 (docs/autoscaling.md, "The oracle's
// capacity").
const capacityRequests = 20_000

func runCapacity(sc Scenario, vi int) float64 {
	p := sc.Versions[vi].Profile
	lr := newRand(sc.Seed, streamLengths)
	reqs := make([]engine.Request, capacityRequests)
	for i := range reqs {
		reqs[i] = engine.Request{ID: fmt.Sprint(i), PromptTokens: sc.PromptTokens.Draw(lr), MaxTokens: sc.MaxTokens}
		if sc.OutputTokens != nil {
			reqs[i].OutputTokens = sc.OutputTokens.Draw(lr)
		}
	}
	s, err := sim.NewScheduler(sim.Config{Profile: p, Seed: sc.Seed})
	if err != nil {
		return 0
	}
	rep := sim.RunVirtual(s, reqs)
	var last time.Duration
	for _, res := range rep.Results {
		last = max(last, res.Done)
	}
	if last <= 0 {
		return 0
	}
	return float64(len(rep.Results)) / last.Seconds()
}

// due is the time of the next heartbeat or evaluation.
func (r *autoscaleRun) due() time.Duration { return min(r.nextHB, r.nextEval) }

// tick runs the heartbeat and evaluation due at f.now.
func (r *autoscaleRun) tick(f *fleet) {
	now := r.due()
	if now == r.nextHB {
		r.heartbeat(f, now)
		r.nextHB += r.cfg.Heartbeat
	}
	if now == r.nextEval {
		r.evaluate(f, now)
		r.nextEval += r.cfg.Interval
	}
}

// heartbeat closes a heartbeat period: starting replicas whose cold start
// is over become ready, drained ones go, rate windows move on, and the
// replicas up are counted.
func (r *autoscaleRun) heartbeat(f *fleet, now time.Duration) {
	hb := r.cfg.Heartbeat
	keep := r.starting[:0]
	for _, s := range r.starting {
		if s.readyAt <= now {
			f.byVersion[r.vi] = append(f.byVersion[r.vi], s.rep)
		} else {
			keep = append(keep, s)
		}
	}
	r.starting = keep
	r.draining = slices.DeleteFunc(r.draining, func(i int) bool {
		if f.reps[i].outstanding == 0 {
			r.gone++
			return true
		}
		return false
	})
	kv := 0.0
	for _, i := range f.byVersion[r.vi] {
		rep := &f.reps[i]
		m := rep.m
		o := metricsStride * m.head
		m.ring[o], m.ring[o+1], m.ring[o+2] = m.arrivals, m.tokens, m.prompt
		m.head = (m.head + 1) % r.slots
		m.filled = min(m.filled+1, r.slots)
		m.arrivals, m.tokens, m.prompt = 0, 0, 0
		kv += float64(rep.step.res.KVPagesUsed) / float64(rep.s.KVPages())
	}
	if n := len(f.byVersion[r.vi]); n > 0 {
		r.maxKV = max(r.maxKV, kv/float64(n))
		r.kvSum += kv / float64(n)
		r.kvN++
	}
	up := len(f.byVersion[r.vi]) + len(r.starting) + len(r.draining)
	r.maxUp = max(r.maxUp, up)
	if now <= f.sc.Duration {
		r.gpuSeconds += float64(up) * hb.Seconds()
		if m := int((now - hb) / time.Minute); m < len(r.minutes) {
			r.minutes[m].replicaSec += float64(up) * hb.Seconds()
		}
	}
}

// sample is a ready replica's heartbeat as the autoscaler reads it.
func (r *autoscaleRun) sample(rep *replica, now time.Duration) autoscale.Sample {
	m := rep.m
	var reqs, toks, prompt int
	for k := range m.filled {
		o := metricsStride * k
		reqs += m.ring[o]
		toks += m.ring[o+1]
		prompt += m.ring[o+2]
	}
	// Over the whole window, also for a replica ready for less: the sum
	// over the replicas is then the version's request rate, and their mean
	// what each would serve at the new count. (A new replica's rate over
	// its own short life is inflated: least-outstanding routing sends it
	// the arrivals until it catches up, and would trigger a second
	// scale-up.) Before a window has passed, over the run so far.
	secs := min(r.cfg.RateWindow, now).Seconds()
	var s autoscale.Sample
	s.Set(autoscale.RPS, float64(reqs)/secs)
	s.Set(autoscale.TokensPerSecond, float64(toks)/secs)
	s.Set(autoscale.PromptTokensPerSecond, float64(prompt)/secs)
	s.Set(autoscale.InFlight, float64(rep.outstanding))
	s.Set(autoscale.QueueDepth, float64(max(0, rep.outstanding-rep.step.res.Batch)))
	s.Set(autoscale.KVCache, float64(rep.step.res.KVPagesUsed)/float64(rep.s.KVPages()))
	return s
}

// evaluate decides the version's count and applies it.
func (r *autoscaleRun) evaluate(f *fleet, now time.Duration) {
	ready := f.byVersion[r.vi]
	samples := make([]autoscale.Sample, len(ready))
	for k, i := range ready {
		samples[k] = r.sample(&f.reps[i], now)
	}
	current := len(ready) + len(r.starting)
	in := autoscale.Input{Now: time.Unix(0, 0).Add(now), Current: current, Ready: samples}
	cfg := r.cfg
	if cfg.Policy.Predictive != autoscale.PredictiveOff {
		horizon := cfg.Horizon
		if horizon <= 0 {
			horizon = autoscale.DefaultHorizon
		}
		horizon += time.Duration(float64(cfg.ColdStart) * max(cfg.Clock.Compression, 1))
		rps, ok, why := autoscale.Forecast(cfg.History, cfg.Clock.At(now), horizon)
		in.Forecast = &autoscale.Prediction{RPS: rps, OK: ok, Why: why}
	}
	// The autoscaler starts with the run: as a new leader, it takes no
	// replica away within its first scale-down window.
	d := r.state.Decide(&cfg.Policy, in)
	if r.onDecision != nil {
		r.onDecision(d)
	}
	r.predicted = max(r.predicted, d.Predicted)
	if !d.Changed || d.Desired == current {
		return
	}
	dir := 1
	if d.Desired < current {
		dir = -1
	}
	if r.lastDir != 0 && dir != r.lastDir {
		r.reversals++
	}
	r.lastDir = dir
	if dir > 0 {
		r.scaleUps[d.Signal]++
	}
	r.decisions = append(r.decisions, DecisionReport{AtSeconds: now.Seconds(), From: current, To: d.Desired,
		Signal: string(d.Signal), Panic: d.Panic, Reason: d.Reason})
	for n := current; n < d.Desired; n++ {
		r.start(f, now)
	}
	for n := current; n > d.Desired; n-- {
		r.remove(f)
	}
}

// start adds a replica that is ready after the cold start.
func (r *autoscaleRun) start(f *fleet, now time.Duration) {
	idx := len(f.reps)
	s, err := f.newScheduler(f.sc.Versions[r.vi].Profile, idx)
	if err != nil {
		return // the profile was checked when the fleet was made
	}
	f.reps = append(f.reps, replica{s: s, version: r.vi, step: &inFlight{}, m: r.newMetrics()})
	r.starting = append(r.starting, startingReplica{rep: idx, readyAt: now + r.cfg.ColdStart})
}

// remove takes one replica away: the newest still starting, else the ready
// one with the fewest requests, which drains.
func (r *autoscaleRun) remove(f *fleet) {
	if n := len(r.starting); n > 0 {
		r.starting = r.starting[:n-1]
		r.gone++
		return
	}
	ready := f.byVersion[r.vi]
	if len(ready) <= 1 {
		return
	}
	best := 0
	for k, i := range ready {
		if f.reps[i].outstanding < f.reps[ready[best]].outstanding {
			best = k
		}
	}
	i := ready[best]
	f.byVersion[r.vi] = slices.Delete(ready, best, best+1)
	f.reps[i].m.draining = true
	r.draining = append(r.draining, i)
}

// arrived counts an arrival at t of a prompt of prompt tokens routed to
// replica i.
func (r *autoscaleRun) arrived(f *fleet, i int, t time.Duration, prompt int) {
	if m := f.reps[i].m; m != nil {
		m.arrivals++
		m.prompt += prompt
	}
	if k := int(t / time.Minute); k < len(r.minutes) {
		r.minutes[k].arrivals++
	}
}

// finished records a finished request's latencies in its arrival minute.
func (r *autoscaleRun) finished(fin *engine.Finished) {
	k := int(fin.Arrival / time.Minute)
	if k >= len(r.minutes) {
		return
	}
	m := &r.minutes[k]
	m.ttft = append(m.ttft, fin.TTFT())
	if fin.CompletionTokens > 1 {
		m.tpot = append(m.tpot, fin.TPOT())
	}
}

// refusedTTFT stands for the TTFT of a request the gateway refused (429):
// it never gets a first token, so its minute counts it past any SLA.
const refusedTTFT = time.Hour

// refused records a request refused at t (shed_outstanding).
func (r *autoscaleRun) refused(t time.Duration) {
	if k := int(t / time.Minute); k < len(r.minutes) {
		r.minutes[k].ttft = append(r.minutes[k].ttft, refusedTTFT)
	}
}
