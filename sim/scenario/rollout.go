package scenario

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"modelplane/busapi"
	"modelplane/drift/stat"
	"modelplane/field"
	"modelplane/judge"
)

// Rollout is a canary rollout run in virtual time: the judge (package
// judge, the very function the rollout controller calls) evaluates the
// candidate against the incumbent every Interval, and its decision moves
// the routing split. The candidate's and the incumbent's weights in the
// file together are the pair's share of the traffic; the rollout splits
// that share, the candidate getting the current step's percent of it
// (none before Start, none after a rollback). Other versions keep their
// weights.
type Rollout struct {
	// Candidate and Incumbent name two of the scenario's versions.
	Candidate string
	Incumbent string
	// Start is when the first step begins, in simulated time; before it
	// the incumbent takes the pair's whole share.
	Start time.Duration
	// Steps are the candidate's percentages with their bake times, in
	// increasing order; the last is 100 percent, which the judge never
	// enters: a rollout that passes the step before it waits for a
	// person's approval, which a simulation does not give.
	Steps []RolloutStep
	// Interval is the time between evaluations; Window how far back each
	// evaluation looks (never before the current step began). Whole
	// seconds.
	Interval time.Duration
	Window   time.Duration
	// Criteria are the judge's thresholds. Drift may be true only when both
	// versions are classic (classifiers or regressors): the run then
	// samples their outputs and measures drift as the real gate does.
	Criteria judge.Criteria
	// SamplingRate is the share of each side's answers sampled for the
	// drift gate, as an endpoint's sampling_rate: above 0, at most 1.
	// Default 1.
	SamplingRate float64
	// DriftMinSamples is the fewest samples each side needs before drift
	// is judged (stat.DefaultMinSamples unless set).
	DriftMinSamples int
	// CompareNaive runs the scenario a second time with the candidate
	// flipped to 100 percent and no judge, for the report's contrast
	// (RolloutReport.Naive); it doubles the run's cost.
	CompareNaive bool
}

// RolloutStep is one step of a rollout.
type RolloutStep struct {
	// Weight is the candidate's percent of the pair's traffic.
	Weight float64
	// Bake is how long the step runs before the judge may advance it.
	Bake time.Duration
}

// The defaults of a rollout section, from the rollout issue: steps of 1, 5,
// 25, 50 and 100 percent baking 10 minutes each, an evaluation every
// minute over the last 5 minutes.
var (
	DefaultRolloutSteps = []RolloutStep{
		{1, 10 * time.Minute}, {5, 10 * time.Minute}, {25, 10 * time.Minute}, {50, 10 * time.Minute}, {100, 0},
	}
	DefaultRolloutInterval = time.Minute
	DefaultRolloutWindow   = 5 * time.Minute
)

// Limits of a rollout section.
const (
	maxRolloutSteps  = 32
	maxRolloutWindow = time.Hour
)

// withDefaults returns a copy of the rollout with the default steps,
// interval and window where they are unset.
func (r Rollout) withDefaults() *Rollout {
	if r.Steps == nil {
		r.Steps = append([]RolloutStep(nil), DefaultRolloutSteps...)
	} else {
		r.Steps = append([]RolloutStep(nil), r.Steps...)
	}
	if r.Interval == 0 {
		r.Interval = DefaultRolloutInterval
	}
	if r.Window == 0 {
		r.Window = DefaultRolloutWindow
	}
	if r.SamplingRate == 0 {
		r.SamplingRate = 1
	}
	if r.DriftMinSamples == 0 {
		r.DriftMinSamples = stat.DefaultMinSamples
	}
	return &r
}

// validate checks the rollout against the scenario it belongs to.
func (r *Rollout) validate(s Scenario) error {
	bad := func(path, format string, args ...any) error {
		return fmt.Errorf("%w: rollout.%s: %s", ErrInvalidScenario, path, fmt.Sprintf(format, args...))
	}
	idx := func(name string) int {
		for i, v := range s.Versions {
			if v.Name == name {
				return i
			}
		}
		return -1
	}
	ci, ii := idx(r.Candidate), idx(r.Incumbent)
	wholeSeconds := func(d time.Duration) bool { return d%time.Second == 0 }
	switch {
	case ci < 0:
		return bad("candidate", "want the name of one of the versions")
	case ii < 0:
		return bad("incumbent", "want the name of one of the versions")
	case ci == ii:
		return bad("incumbent", "want a version other than the candidate")
	case s.Versions[ci].Weight+s.Versions[ii].Weight <= 0:
		return bad("candidate", "the candidate's and incumbent's weights are both 0; want the pair to get traffic")
	case r.Start < 0 || r.Start >= s.Duration || !wholeSeconds(r.Start):
		return bad("start", "want whole seconds, 0s or more, less than the duration %v", s.Duration)
	case r.Interval < time.Second || r.Interval > maxRolloutWindow || !wholeSeconds(r.Interval):
		return bad("interval", "want whole seconds, 1s to %v", maxRolloutWindow)
	case r.Window < time.Second || r.Window > maxRolloutWindow || !wholeSeconds(r.Window):
		return bad("window", "want whole seconds, 1s to %v", maxRolloutWindow)
	case len(r.Steps) < 2 || len(r.Steps) > maxRolloutSteps:
		return bad("steps", "want 2 to %d steps, the last of 100 percent", maxRolloutSteps)
	}
	prev := 0.0
	for i, st := range r.Steps {
		path := fmt.Sprintf("steps[%d]", i)
		last := i == len(r.Steps)-1
		switch {
		case !finite(st.Weight) || st.Weight <= prev || st.Weight > 100:
			return bad(path+".weight", "want a percent above the step before's (%g), at most 100", prev)
		case last && st.Weight != 100:
			return bad(path+".weight", "want 100: the last step is the one that waits for approval")
		case !last && st.Weight == 100:
			return bad(path+".weight", "want below 100: only the last step is 100 percent")
		case st.Bake < 0 || st.Bake > maxDuration:
			return bad(path+".bake", "want 0s to %v", maxDuration)
		}
		prev = st.Weight
	}
	var errs field.Errors
	r.Criteria.Validate(&errs, "rollout.criteria")
	if len(errs) > 0 {
		return fmt.Errorf("%w: %s: %s", ErrInvalidScenario, errs[0].Field, errs[0].Message)
	}
	candLLM, incLLM := s.Versions[ci].Profile.IsLLM(), s.Versions[ii].Profile.IsLLM()
	switch {
	case candLLM != incLLM:
		return bad("candidate", "one of the candidate and incumbent is an LLM and the other is not; want two of a kind")
	case r.Criteria.Drift && candLLM:
		return bad("criteria.drift", "the simulation measures output drift of classifiers and regressors only; want false for LLMs")
	case !finite(r.SamplingRate) || r.SamplingRate <= 0 || r.SamplingRate > 1:
		return bad("sampling_rate", "want a share above 0, at most 1")
	case r.DriftMinSamples < 1 || r.DriftMinSamples > 10_000_000:
		return bad("drift_min_samples", "want 1 to 10000000")
	}
	return nil
}

// The states of a rollout in a run (RolloutReport.State).
const (
	RolloutPending    = "pending"
	RolloutStepping   = "in_progress"
	RolloutWaiting    = "waiting_for_approval"
	RolloutRolledBack = "rolled_back"
)

// The rollout's own moves in the timeline, next to the judge's decisions.
const (
	decisionStart   = "start"
	decisionWaiting = "wait_for_approval"
)

// RolloutReport is what the rollout did in a run. Times are seconds of
// simulated time since the run began.
type RolloutReport struct {
	Candidate string `json:"candidate"`
	Incumbent string `json:"incumbent"`
	// LLM is true when the pair are LLMs, judged on TPOT; false for
	// classic versions, judged on request latency.
	LLM bool `json:"llm"`
	// State at the end of the run: in_progress, waiting_for_approval or
	// rolled_back (pending when the run ended before Start).
	State string `json:"state"`
	// Step is the 1-based step the rollout ended on and WeightPct the
	// candidate's percent of the pair's traffic at the end (0 after a
	// rollback); MaxWeightPct the most it ever had.
	Step         int     `json:"step"`
	WeightPct    float64 `json:"weight_pct"`
	MaxWeightPct float64 `json:"max_weight_pct"`
	// StartSeconds is when the first step began.
	StartSeconds    float64        `json:"start_seconds"`
	IntervalSeconds float64        `json:"evaluation_interval_seconds"`
	WindowSeconds   float64        `json:"evaluation_window_seconds"`
	Criteria        judge.Criteria `json:"criteria"`
	Evaluations     int            `json:"evaluations"`
	// WaitingSinceSeconds is when the rollout stopped before 100 percent
	// to wait for approval; nil when it did not.
	WaitingSinceSeconds *float64 `json:"waiting_since_seconds,omitempty"`
	// Rollback is the judge's rollback; nil when it did not trip.
	Rollback *RollbackReport `json:"rollback,omitempty"`
	// Timeline is every evaluation and every change of step.
	Timeline []RolloutEvent `json:"timeline"`
	// Naive is the contrast: the candidate flipped to 100 percent; nil
	// unless the rollout asks for it (compare_naive) and does not gate on
	// drift.
	Naive *NaiveReport `json:"naive,omitempty"`
	// NoDriftGate is the contrast of a rollout that gates on drift (with
	// compare_naive): the same rollout without the drift gate.
	NoDriftGate *NoGateReport `json:"no_drift_gate,omitempty"`
}

// RollbackReport is the judge's rollback: when, with what verdict, what
// the candidate served, and what the incumbent's users saw around it.
type RollbackReport struct {
	// AtSeconds is the virtual instant of the decision; from it the
	// candidate gets no new request.
	AtSeconds float64 `json:"at_seconds"`
	// AfterStartSeconds is AtSeconds less the rollout's start.
	AfterStartSeconds float64 `json:"after_start_seconds"`
	// Verdict is the judge's, with every number and threshold; Trigger
	// names its first failing check (drift, p99_tpot_ms, ...).
	Verdict judge.Verdict `json:"verdict"`
	Trigger string        `json:"trigger"`
	// Drift is the drift the gate measured in that evaluation; nil when
	// the rollout does not gate on drift.
	Drift *DriftSummary `json:"drift,omitempty"`
	// CandidateWindow and IncumbentWindow are the windows it judged.
	CandidateWindow WindowSummary `json:"candidate_window"`
	IncumbentWindow WindowSummary `json:"incumbent_window"`
	// CandidateRequests were routed to the candidate before the rollback
	// (all of its requests: it gets none after), CandidatePerSecond per
	// second of its exposure (start to rollback), and
	// CandidateInFlight were still queued or running at the rollback
	// (they finish on the candidate's replicas, which stay up).
	CandidateRequests  int     `json:"candidate_requests"`
	CandidatePerSecond float64 `json:"candidate_requests_per_second"`
	CandidateInFlight  int     `json:"candidate_in_flight_at_rollback"`
	// CandidateLastDoneSeconds is when the candidate finished its last
	// request.
	CandidateLastDoneSeconds float64 `json:"candidate_last_done_seconds"`
	// IncumbentTPOTBefore is the TPOT of the incumbent's requests that
	// arrived after warmup and finished before the rollback;
	// IncumbentTPOTAfter of those that arrived after it.
	IncumbentTPOTBefore Latency `json:"incumbent_tpot_before_ms"`
	IncumbentTPOTAfter  Latency `json:"incumbent_tpot_after_ms"`
}

// WindowSummary is one side of an evaluation window in numbers.
type WindowSummary struct {
	Requests     uint64  `json:"requests"`
	Errors       uint64  `json:"errors"`
	Streams      uint64  `json:"streams"`
	P99TPOTMS    float64 `json:"p99_tpot_ms"`
	P99LatencyMS float64 `json:"p99_latency_ms"`
}

func summarize(w judge.Window) WindowSummary {
	return WindowSummary{Requests: w.Requests, Errors: w.Errors, Streams: w.Streams,
		P99TPOTMS: busapi.QuantileMS(w.TPOT, 0.99), P99LatencyMS: busapi.QuantileMS(w.Latency, 0.99)}
}

// RolloutEvent is one evaluation or change of step.
type RolloutEvent struct {
	AtSeconds float64 `json:"at_seconds"`
	// Step is 1-based; WeightPct the candidate's percent after the event.
	Step      int     `json:"step"`
	WeightPct float64 `json:"weight_pct"`
	// Decision is the judge's (advance, hold, rollback), or start or
	// wait_for_approval for the rollout's own moves.
	Decision string `json:"decision"`
	Reason   string `json:"reason,omitempty"`
	// Candidate and Incumbent summarise the windows of an evaluation.
	Candidate *WindowSummary `json:"candidate,omitempty"`
	Incumbent *WindowSummary `json:"incumbent,omitempty"`
	// Drift is the evaluation's drift measurement, with drift gating on.
	Drift *DriftSummary `json:"drift,omitempty"`
}

// DriftSummary is the output drift of the candidate from the incumbent
// over one evaluation window, as the judge got it (judge.Drift) plus the
// numbers behind it: the raw Wasserstein-1, the incumbent's spread it is
// divided by, and both sides' sampled means and sds.
type DriftSummary struct {
	judge.Drift
	MinSamples    int     `json:"min_samples"`
	W1            float64 `json:"w1"`
	Spread        float64 `json:"spread"`
	CandidateMean float64 `json:"candidate_mean"`
	CandidateSD   float64 `json:"candidate_sd"`
	IncumbentMean float64 `json:"incumbent_mean"`
	IncumbentSD   float64 `json:"incumbent_sd"`
}

// measureDrift is what the real gate computes (drift.Reader.Compare) on
// the sampled outputs of one window, the incumbent as the reference:
// Wasserstein-1 from both quantile functions at stat.W1Levels (the
// reader's quantiles are exact interpolation up to 8,192 samples, as
// here), divided by the incumbent's population standard deviation
// (stat.Normalised), against stat.W1Threshold, judged only when both
// sides hold minSamples.
func measureDrift(cand, inc []float64, minSamples int) *DriftSummary {
	d := &DriftSummary{Drift: judge.Drift{Metric: stat.MetricW1, Threshold: stat.W1Threshold,
		CandidateSamples: uint64(len(cand)), IncumbentSamples: uint64(len(inc)),
		Enough: len(cand) >= minSamples && len(inc) >= minSamples}, MinSamples: minSamples}
	d.CandidateMean, d.CandidateSD = stat.MeanStd(cand)
	d.IncumbentMean, d.IncumbentSD = stat.MeanStd(inc)
	d.Spread = d.IncumbentSD
	if len(cand) == 0 || len(inc) == 0 {
		return d
	}
	c, i := slices.Clone(cand), slices.Clone(inc)
	slices.Sort(c)
	slices.Sort(i)
	levels := stat.W1Levels()
	qc, qi := make([]float64, len(levels)), make([]float64, len(levels))
	for k, l := range levels {
		qc[k], qi[k] = stat.QuantileInterpolated(c, l), stat.QuantileInterpolated(i, l)
	}
	d.W1 = stat.Wasserstein1Quantiles(qi, qc)
	d.Value = stat.Normalised(d.W1, d.Spread)
	return d
}

// NoGateReport is the same run with the drift gate off (criteria.drift
// false, everything else equal): where the rollout got to and what the
// candidate answered on the way.
type NoGateReport struct {
	State               string   `json:"state"`
	Step                int      `json:"step"`
	WeightPct           float64  `json:"weight_pct"`
	MaxWeightPct        float64  `json:"max_weight_pct"`
	WaitingSinceSeconds *float64 `json:"waiting_since_seconds,omitempty"`
	Evaluations         int      `json:"evaluations"`
	// CandidateRequests were routed to the candidate over the run, and
	// CandidateOutput is what it answered.
	CandidateRequests int          `json:"candidate_requests"`
	CandidateOutput   *OutputStats `json:"candidate_output,omitempty"`
	IncumbentOutput   *OutputStats `json:"incumbent_output,omitempty"`
}

// NaiveReport is the same run with the candidate flipped to 100 percent
// with no judge: the candidate's profile on the pair's GPUs (candidate's
// and incumbent's together), taking the pair's whole share.
type NaiveReport struct {
	GPUs int `json:"gpus"`
	// Requests is what the candidate served in it; TPOT and TTFT are what
	// everyone in the pair's share saw (requests that arrived after
	// warmup and completed).
	Requests int     `json:"requests"`
	TPOT     Latency `json:"tpot_ms"`
	TTFT     Latency `json:"ttft_ms"`
	// SLAP99TPOTMS is the criteria's ceiling; OverSLA is whether the naive
	// p99 TPOT breaks it.
	SLAP99TPOTMS float64 `json:"sla_p99_tpot_ms"`
	OverSLA      bool    `json:"over_sla"`
}

// naiveScenario is s with the rollout's candidate flipped to 100 percent:
// the incumbent's entry replaced by the candidate's profile on both
// versions' GPUs with both weights, and no rollout.
func naiveScenario(s Scenario) Scenario {
	r := s.Rollout
	var cand Version
	for _, v := range s.Versions {
		if v.Name == r.Candidate {
			cand = v
		}
	}
	n := s
	n.Rollout = nil
	n.Versions = nil
	for _, v := range s.Versions {
		switch v.Name {
		case r.Candidate:
			continue
		case r.Incumbent:
			c := cand
			c.GPUs += v.GPUs
			c.Weight += v.Weight
			n.Versions = append(n.Versions, c)
		default:
			n.Versions = append(n.Versions, v)
		}
	}
	return n
}

// slot is one second of one version's request statistics.
type slot struct {
	sec                       int64 // the second it holds; -1 when unused
	requests, errors, streams uint64
	latency, tpot             []uint64
	outputs                   []float64 // sampled classic outputs (drift gate)
}

// rolloutRun is the rollout's state during a run.
type rolloutRun struct {
	r            *Rollout
	cand, inc    int // version indexes
	pairWeight   float64
	state        string
	step         int // index into r.Steps
	weight       float64
	maxWeight    float64
	stepStart    time.Duration
	nextEval     time.Duration
	evaluations  int
	slots        [2][]slot // candidate, incumbent rings
	timeline     []RolloutEvent
	waitingSince *float64
	rollback     *RollbackReport
	rollbackAt   time.Duration
	incBefore    []time.Duration
	incAfter     []time.Duration
	candLastDone time.Duration
	llm          bool       // the pair are LLMs: judged on TPOT
	sampling     *rand.Rand // the drift gate's sampling draws
	lastDrift    *DriftSummary
}

func newRolloutRun(sc Scenario) *rolloutRun {
	r := sc.Rollout
	rr := &rolloutRun{r: r, state: RolloutPending, nextEval: r.Start,
		sampling: rand.New(rand.NewPCG(sc.Seed, streamSampling))}
	for i, v := range sc.Versions {
		switch v.Name {
		case r.Candidate:
			rr.cand = i
		case r.Incumbent:
			rr.inc = i
		}
	}
	rr.pairWeight = sc.Versions[rr.cand].Weight + sc.Versions[rr.inc].Weight
	rr.llm = sc.Versions[rr.cand].Profile.IsLLM()
	n := int(r.Window / time.Second)
	for side := range rr.slots {
		rr.slots[side] = make([]slot, n)
		for i := range rr.slots[side] {
			rr.slots[side][i] = slot{sec: -1, latency: make([]uint64, busapi.LatencyBuckets), tpot: make([]uint64, busapi.LatencyBuckets)}
		}
	}
	return rr
}

// side is the ring of version vi, nil for a version the judge does not read.
func (rr *rolloutRun) side(vi int) []slot {
	switch vi {
	case rr.cand:
		return rr.slots[0]
	case rr.inc:
		return rr.slots[1]
	}
	return nil
}

// at returns the slot of second t of ring s, cleared when it held an older
// second.
func at(s []slot, t time.Duration) *slot {
	sec := int64(t / time.Second)
	sl := &s[sec%int64(len(s))]
	if sl.sec != sec {
		sl.sec, sl.requests, sl.errors, sl.streams = sec, 0, 0, 0
		clear(sl.latency)
		clear(sl.tpot)
		sl.outputs = sl.outputs[:0]
	}
	return sl
}

// failed counts a request of version vi that ended at t without an answer
// (shed or rejected): a request and an error.
func (rr *rolloutRun) failed(vi int, t time.Duration) {
	if s := rr.side(vi); s != nil {
		sl := at(s, t)
		sl.requests++
		sl.errors++
	}
}

// finished counts a completed request of version vi.
func (rr *rolloutRun) finished(vi int, arrival, done time.Duration, tokens int, tpot time.Duration, warmup time.Duration) {
	s := rr.side(vi)
	if s == nil {
		return
	}
	sl := at(s, done)
	sl.requests++
	sl.latency[busapi.LatencyBucket(done-arrival)]++
	if tokens > 1 {
		sl.streams++
		sl.tpot[busapi.LatencyBucket(tpot)]++
	}
	if vi == rr.cand {
		rr.candLastDone = max(rr.candLastDone, done)
	}
	if vi == rr.inc && tokens > 1 && arrival >= warmup {
		switch {
		case rr.state != RolloutRolledBack:
			rr.incBefore = append(rr.incBefore, tpot)
		case arrival >= rr.rollbackAt:
			rr.incAfter = append(rr.incAfter, tpot)
		}
	}
}

// answered counts a classic answer of version vi, as the gateway counts
// request_stats (a failure is a request and an error), and samples its
// output for the drift gate at the sampling rate.
func (rr *rolloutRun) answered(f *fleet, vi int, a answer) {
	s := rr.side(vi)
	if s == nil {
		return
	}
	sl := at(s, a.done)
	sl.requests++
	if vi == rr.cand {
		rr.candLastDone = max(rr.candLastDone, a.done)
	}
	if a.fail {
		sl.errors++
		return
	}
	sl.latency[busapi.LatencyBucket(a.done-a.arrival)]++
	if rr.r.Criteria.Drift && (rr.r.SamplingRate >= 1 || rr.sampling.Float64() < rr.r.SamplingRate) {
		sl.outputs = append(sl.outputs, a.out)
	}
}

// outputs gathers ring s's sampled outputs over [from, to).
func outputs(s []slot, from, to time.Duration) []float64 {
	var out []float64
	lo, hi := int64(from/time.Second), int64(to/time.Second)
	for i := range s {
		if sl := &s[i]; sl.sec >= lo && sl.sec < hi {
			out = append(out, sl.outputs...)
		}
	}
	return out
}

// window sums ring s over [from, to).
func window(s []slot, from, to time.Duration) judge.Window {
	w := judge.Window{Latency: make([]uint64, busapi.LatencyBuckets), TPOT: make([]uint64, busapi.LatencyBuckets)}
	lo, hi := int64(from/time.Second), int64(to/time.Second)
	for i := range s {
		sl := &s[i]
		if sl.sec < lo || sl.sec >= hi {
			continue
		}
		w.Requests += sl.requests
		w.Errors += sl.errors
		w.Streams += sl.streams
		for b := range sl.latency {
			w.Latency[b] += sl.latency[b]
			w.TPOT[b] += sl.tpot[b]
		}
	}
	return w
}

// active reports whether the rollout still evaluates.
func (rr *rolloutRun) active() bool {
	return rr.state != RolloutRolledBack
}

// tick does what the rollout does at rr.nextEval: start, or evaluate and
// act on the verdict; it returns true when the split changed.
func (rr *rolloutRun) tick(f *fleet) bool {
	t := rr.nextEval
	r := rr.r
	rr.nextEval += r.Interval
	if rr.state == RolloutPending {
		rr.state, rr.stepStart, rr.weight = RolloutStepping, t, r.Steps[0].Weight
		rr.maxWeight = rr.weight
		rr.event(t, decisionStart, "rollout starts at the first step", nil, nil)
		return true
	}
	from := max(t-r.Window, rr.stepStart)
	cw, iw := window(rr.slots[0], from, t), window(rr.slots[1], from, t)
	in := judge.Input{Candidate: cw, Incumbent: iw, LLM: rr.llm, Baked: t-rr.stepStart >= r.Steps[rr.step].Bake}
	rr.lastDrift = nil
	if r.Criteria.Drift {
		rr.lastDrift = measureDrift(outputs(rr.slots[0], from, t), outputs(rr.slots[1], from, t), r.DriftMinSamples)
		in.Drift = &rr.lastDrift.Drift
	}
	v := judge.Evaluate(r.Criteria, in)
	rr.evaluations++
	cs, is := summarize(cw), summarize(iw)
	switch v.Decision {
	case judge.Rollback:
		rr.state, rr.weight, rr.rollbackAt = RolloutRolledBack, 0, t
		rr.rollback = &RollbackReport{AtSeconds: t.Seconds(), AfterStartSeconds: (t - r.Start).Seconds(),
			Verdict: v, CandidateWindow: cs, IncumbentWindow: is, Drift: rr.lastDrift,
			CandidateRequests: f.vs[rr.cand].requests}
		for _, ch := range v.Checks {
			if ch.Outcome == judge.Fail {
				rr.rollback.Trigger = ch.Name
				break
			}
		}
		if exposed := (t - r.Start).Seconds(); exposed > 0 {
			rr.rollback.CandidatePerSecond = float64(rr.rollback.CandidateRequests) / exposed
		}
		for _, ri := range f.byVersion[rr.cand] {
			rr.rollback.CandidateInFlight += f.reps[ri].outstanding
		}
		rr.event(t, string(v.Decision), v.Reason, &cs, &is)
		return true
	case judge.Advance:
		if rr.state == RolloutWaiting {
			break
		}
		if r.Steps[rr.step+1].Weight >= 100 {
			rr.state = RolloutWaiting
			ws := t.Seconds()
			rr.waitingSince = &ws
			rr.event(t, string(v.Decision), v.Reason, &cs, &is)
			rr.event(t, decisionWaiting, fmt.Sprintf("the next step is %g percent: waiting for a person's approval", r.Steps[rr.step+1].Weight), nil, nil)
			return false
		}
		rr.step++
		rr.stepStart, rr.weight = t, r.Steps[rr.step].Weight
		rr.maxWeight = max(rr.maxWeight, rr.weight)
		rr.event(t, string(v.Decision), v.Reason, &cs, &is)
		return true
	}
	rr.event(t, string(v.Decision), v.Reason, &cs, &is)
	return false
}

func (rr *rolloutRun) event(t time.Duration, decision, reason string, c, i *WindowSummary) {
	ev := RolloutEvent{AtSeconds: t.Seconds(), Step: rr.step + 1, WeightPct: rr.weight,
		Decision: decision, Reason: reason, Candidate: c, Incumbent: i}
	if c != nil {
		ev.Drift = rr.lastDrift
	}
	rr.timeline = append(rr.timeline, ev)
}

// weights returns the routing weights of the versions under the rollout's
// current split.
func (rr *rolloutRun) weights(vs []Version) []float64 {
	w := make([]float64, len(vs))
	for i, v := range vs {
		w[i] = v.Weight
	}
	w[rr.cand] = rr.pairWeight * rr.weight / 100
	w[rr.inc] = rr.pairWeight - w[rr.cand]
	return w
}

func (rr *rolloutRun) report() *RolloutReport {
	r := rr.r
	out := &RolloutReport{Candidate: r.Candidate, Incumbent: r.Incumbent, LLM: rr.llm, State: rr.state,
		Step: rr.step + 1, WeightPct: rr.weight, MaxWeightPct: rr.maxWeight,
		StartSeconds: r.Start.Seconds(), IntervalSeconds: r.Interval.Seconds(), WindowSeconds: r.Window.Seconds(),
		Criteria: r.Criteria, Evaluations: rr.evaluations, WaitingSinceSeconds: rr.waitingSince,
		Rollback: rr.rollback, Timeline: rr.timeline}
	if out.Timeline == nil {
		out.Timeline = []RolloutEvent{}
	}
	if rb := out.Rollback; rb != nil {
		rb.CandidateLastDoneSeconds = rr.candLastDone.Seconds()
		rb.IncumbentTPOTBefore = latencyOf(rr.incBefore)
		rb.IncumbentTPOTAfter = latencyOf(rr.incAfter)
	}
	return out
}
