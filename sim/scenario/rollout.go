package scenario

import (
	"fmt"
	"time"

	"modelplane/agent/proto"
	"modelplane/judge"
	"modelplane/validate"
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
	// Criteria are the judge's thresholds. The simulation measures no
	// output drift, so Drift must be false.
	Criteria judge.Criteria
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
	var errs validate.Errors
	r.Criteria.Validate(&errs, "rollout.criteria")
	if len(errs) > 0 {
		return fmt.Errorf("%w: %s: %s", ErrInvalidScenario, errs[0].Field, errs[0].Message)
	}
	if r.Criteria.Drift {
		return bad("criteria.drift", "the simulation measures no output drift; want false")
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
	// unless the rollout asks for it (compare_naive).
	Naive *NaiveReport `json:"naive,omitempty"`
}

// RollbackReport is the judge's rollback: when, with what verdict, what
// the candidate served, and what the incumbent's users saw around it.
type RollbackReport struct {
	// AtSeconds is the virtual instant of the decision; from it the
	// candidate gets no new request.
	AtSeconds float64 `json:"at_seconds"`
	// AfterStartSeconds is AtSeconds less the rollout's start.
	AfterStartSeconds float64 `json:"after_start_seconds"`
	// Verdict is the judge's, with every number and threshold.
	Verdict judge.Verdict `json:"verdict"`
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
		P99TPOTMS: proto.QuantileMS(w.TPOT, 0.99), P99LatencyMS: proto.QuantileMS(w.Latency, 0.99)}
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
}

func newRolloutRun(sc Scenario) *rolloutRun {
	r := sc.Rollout
	rr := &rolloutRun{r: r, state: RolloutPending, nextEval: r.Start}
	for i, v := range sc.Versions {
		switch v.Name {
		case r.Candidate:
			rr.cand = i
		case r.Incumbent:
			rr.inc = i
		}
	}
	rr.pairWeight = sc.Versions[rr.cand].Weight + sc.Versions[rr.inc].Weight
	n := int(r.Window / time.Second)
	for side := range rr.slots {
		rr.slots[side] = make([]slot, n)
		for i := range rr.slots[side] {
			rr.slots[side][i] = slot{sec: -1, latency: make([]uint64, proto.LatencyBuckets), tpot: make([]uint64, proto.LatencyBuckets)}
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
	sl.latency[proto.LatencyBucket(done-arrival)]++
	if tokens > 1 {
		sl.streams++
		sl.tpot[proto.LatencyBucket(tpot)]++
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

// window sums ring s over [from, to).
func window(s []slot, from, to time.Duration) judge.Window {
	w := judge.Window{Latency: make([]uint64, proto.LatencyBuckets), TPOT: make([]uint64, proto.LatencyBuckets)}
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
	v := judge.Evaluate(r.Criteria, judge.Input{Candidate: cw, Incumbent: iw, LLM: true,
		Baked: t-rr.stepStart >= r.Steps[rr.step].Bake})
	rr.evaluations++
	cs, is := summarize(cw), summarize(iw)
	switch v.Decision {
	case judge.Rollback:
		rr.state, rr.weight, rr.rollbackAt = RolloutRolledBack, 0, t
		rr.rollback = &RollbackReport{AtSeconds: t.Seconds(), AfterStartSeconds: (t - r.Start).Seconds(),
			Verdict: v, CandidateWindow: cs, IncumbentWindow: is,
			CandidateRequests: f.vs[rr.cand].requests}
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
	rr.timeline = append(rr.timeline, RolloutEvent{AtSeconds: t.Seconds(), Step: rr.step + 1, WeightPct: rr.weight,
		Decision: decision, Reason: reason, Candidate: c, Incumbent: i})
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
	out := &RolloutReport{Candidate: r.Candidate, Incumbent: r.Incumbent, State: rr.state,
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
