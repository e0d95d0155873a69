package scenario

import (
	"context"
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/coder/quartz"

	"modelplane/autoscale"
	"modelplane/engine"
	"modelplane/sim"
	"modelplane/sim/profile"
)

// Options are how a run is observed; none of them changes its result.
type Options struct {
	// Clock, when set, is read before and after the run to report its
	// wall time and speed-up over real time. Without it they are 0, and
	// two runs of a scenario give equal reports.
	Clock quartz.Clock
}

// Independent generator streams, so that, for instance, changing the
// routing weights does not change the arrival times or lengths drawn.
const (
	streamArrivals = 0xa1
	streamLengths  = 0x1e
	streamRouting  = 0x20
	streamTenants  = 0x7e
	streamPredict  = 0x9d // classic versions' errors, latencies and outputs
	streamSampling = 0x5a // which classic answers the drift gate samples
)

// Run simulates the scenario in virtual time and reports what it measured.
//
// Each GPU is an engine.Scheduler. An arrival picks a tenant by share and a
// version by weight, then the version's replica with the fewest requests
// queued or running (ties go round-robin), and is submitted to it. A
// replica with work steps back to back: at the end of each step the
// step's tokens and finished requests are handed out and the next step
// starts; an idle replica wakes at its next arrival. The loop always takes
// the earliest event next, an arrival before a step ending at the same
// instant (so the step admits it), and replicas by index on a tie.
//
// It returns the context's error when ctx is done before the run is.
func Run(ctx context.Context, sc Scenario, opt Options) (Report, error) {
	sc = sc.WithDefaults()
	if err := sc.Validate(); err != nil {
		return Report{}, err
	}
	var t0 time.Time
	if opt.Clock != nil {
		t0 = opt.Clock.Now()
	}
	f, err := newFleet(sc)
	if err != nil {
		return Report{}, err
	}
	if err := f.run(ctx); err != nil {
		return Report{}, err
	}
	rep := f.report()
	if sc.Rollout != nil && sc.Rollout.CompareNaive && sc.Rollout.Criteria.Drift {
		// The contrast of a drift gate: the same rollout without it.
		nogate := sc
		r := *sc.Rollout
		r.Criteria.Drift, r.CompareNaive = false, false
		nogate.Rollout = &r
		n, err := Run(ctx, nogate, Options{})
		if err != nil {
			return Report{}, fmt.Errorf("rollout without the drift gate: %w", err)
		}
		ng := &NoGateReport{State: n.Rollout.State, Step: n.Rollout.Step, WeightPct: n.Rollout.WeightPct,
			MaxWeightPct: n.Rollout.MaxWeightPct, WaitingSinceSeconds: n.Rollout.WaitingSinceSeconds,
			Evaluations: n.Rollout.Evaluations}
		if v, ok := n.Version(r.Candidate); ok {
			ng.CandidateRequests, ng.CandidateOutput = v.Requests, v.Output
		}
		if v, ok := n.Version(r.Incumbent); ok {
			ng.IncumbentOutput = v.Output
		}
		rep.Rollout.NoDriftGate = ng
	} else if sc.Rollout != nil && sc.Rollout.CompareNaive {
		// The contrast: the same arrivals with the candidate flipped to
		// 100 percent and no judge.
		naive, err := Run(ctx, naiveScenario(sc), Options{})
		if err != nil {
			return Report{}, fmt.Errorf("naive flip: %w", err)
		}
		n := naive.Versions[0]
		for _, v := range naive.Versions {
			if v.Name == sc.Rollout.Candidate {
				n = v
			}
		}
		sla := sc.Rollout.Criteria.MaxP99TPOTMS
		rep.Rollout.Naive = &NaiveReport{GPUs: n.GPUs, Requests: n.Requests, TPOT: n.TPOT, TTFT: n.TTFT,
			SLAP99TPOTMS: sla, OverSLA: sla > 0 && n.TPOT.P99 > sla}
	}
	if a := sc.Autoscale; a != nil && a.ComparePredictive && a.Policy.Predictive != autoscale.PredictiveOff {
		// The contrast: the same arrivals with predictive mode off.
		off := sc
		oa := *a
		oa.Policy.Predictive, oa.ComparePredictive = autoscale.PredictiveOff, false
		off.Autoscale = &oa
		n, err := Run(ctx, off, Options{})
		if err != nil {
			return Report{}, fmt.Errorf("predictive off: %w", err)
		}
		rep.Autoscale.PredictiveOff = n.Autoscale
		rep.Autoscale.Comparison = compareWithoutPredictive(rep.Autoscale, n.Autoscale)
	}
	if opt.Clock != nil {
		rep.WallSeconds = opt.Clock.Now().Sub(t0).Seconds()
		if rep.WallSeconds > 0 {
			rep.SpeedUp = rep.SimSeconds / rep.WallSeconds
		}
	}
	return rep, nil
}

// fleet is the state of one run.
type fleet struct {
	sc        Scenario
	reps      []replica
	byVersion [][]int // replica indexes of each version
	rr        []int   // round-robin start of each version's least-outstanding scan
	heap      []int   // replicas with a pending event, earliest first

	arrivals, lengths, routing, tenantRNG *rand.Rand
	cumWeight, cumShare                   []float64
	tenantIdx                             map[string]int
	nextArrival                           time.Duration
	promptSum, outputSum                  int64

	prompt []int32 // prompt tokens of each request, by request number (its id)
	// events is the buffer every replica's step writes its token events
	// to: f.sum reads them before the next step (sim.Config.Events).
	events []engine.TokenEvent

	now     time.Duration // time of the last event handled
	steps   int64
	tokens  int64
	vs      []versionStats
	ts      []tenantStats
	pageErr int // steps whose counted pages differ from the scheduler's (tests)

	ro *rolloutRun   // nil without a rollout
	as *autoscaleRun // nil without autoscaling

	classics []*classic // each version's draws; nil for an LLM version
	answers  []answer   // classic answers in flight, a heap
	predict  *rand.Rand
}

// replica is one GPU of the fleet. It is kept small: every arrival scans
// its version's replicas for the least outstanding, and the event heap
// compares their times, so that a fleet's replicas fit the CPU's first
// cache; the step in flight is behind a pointer.
type replica struct {
	s           *engine.Scheduler
	version     int
	at          time.Duration   // when the pending event is due
	step        *inFlight       // the step in flight; nil for a classic replica
	scheduled   bool            // in the heap
	outstanding int             // submitted and not finished
	m           *replicaMetrics // heartbeat counters of an autoscaled replica
}

// inFlight is a replica's step in flight, handed out at its end.
type inFlight struct {
	res engine.StepResult
	sum stepSum // what res's events come to
}

type versionStats struct {
	requests, shed, rejected, completed, completedWindow int
	errors                                               int // classic requests failed by error_rate
	outN                                                 int
	outSum, outSumSq                                     float64
	tokensWindow                                         int64
	preemptions                                          int
	ttft, tpot, e2e                                      []time.Duration
	maxBatch                                             int
	maxKV                                                float64
	// integrals over measured steps of duration (seconds) × quantity
	batch, kv, pagedSlots, held float64
	contig                      []float64
}

type tenantStats struct {
	requests, completed int
	ttft, tpot          []time.Duration
}

func newFleet(sc Scenario) (*fleet, error) {
	f := &fleet{
		sc:        sc,
		byVersion: make([][]int, len(sc.Versions)),
		rr:        make([]int, len(sc.Versions)),
		arrivals:  rand.New(rand.NewPCG(sc.Seed, streamArrivals)),
		lengths:   rand.New(rand.NewPCG(sc.Seed, streamLengths)),
		routing:   rand.New(rand.NewPCG(sc.Seed, streamRouting)),
		tenantRNG: rand.New(rand.NewPCG(sc.Seed, streamTenants)),
		predict:   rand.New(rand.NewPCG(sc.Seed, streamPredict)),
		classics:  make([]*classic, len(sc.Versions)),
		tenantIdx: map[string]int{},
		vs:        make([]versionStats, len(sc.Versions)),
		ts:        make([]tenantStats, len(sc.Tenants)),
	}
	weights := make([]float64, len(sc.Versions))
	for vi, v := range sc.Versions {
		weights[vi] = v.Weight
	}
	if sc.Rollout != nil {
		f.ro = newRolloutRun(sc)
		weights = f.ro.weights(sc.Versions)
	}
	f.setWeights(weights)
	for vi, v := range sc.Versions {
		f.vs[vi].contig = make([]float64, len(sc.ContiguousMaxLen))
		if isClassic(v.Profile) {
			c := newClassic(v.Profile)
			f.classics[vi] = &c
			for range v.GPUs {
				f.byVersion[vi] = append(f.byVersion[vi], len(f.reps))
				f.reps = append(f.reps, replica{version: vi})
			}
			continue
		}
		for range v.GPUs {
			idx := len(f.reps)
			s, err := f.newScheduler(v.Profile, idx)
			if err != nil {
				return nil, fmt.Errorf("%w: versions[%d].profile: %w", ErrInvalidScenario, vi, err)
			}
			f.reps = append(f.reps, replica{s: s, version: vi, step: &inFlight{}})
			f.byVersion[vi] = append(f.byVersion[vi], idx)
		}
	}
	var sum float64
	for i, t := range sc.Tenants {
		sum += t.Share
		f.cumShare = append(f.cumShare, sum)
		f.tenantIdx[t.Name] = i
	}
	if sc.Autoscale != nil {
		f.as = newAutoscaleRun(f)
	}
	f.heap = make([]int, 0, len(f.reps))
	f.prompt = make([]int32, 0, int(min(sc.Arrivals.Rate*sc.Duration.Seconds()*1.05+16, 1<<24)))
	f.nextArrival = f.arrivalAfter(0, 0)
	return f, nil
}

// newScheduler is replica idx's scheduler, with its own stream of the
// completion lengths the profile draws, writing its events to f.events.
func (f *fleet) newScheduler(p profile.Profile, idx int) (*engine.Scheduler, error) {
	return sim.NewScheduler(sim.Config{Profile: p, Seed: f.sc.Seed ^ (uint64(idx+1) * 0x9e3779b97f4a7c15), Lean: true, Events: &f.events})
}

// setWeights sets the routing weights of the versions.
func (f *fleet) setWeights(w []float64) {
	f.cumWeight = f.cumWeight[:0]
	var sum float64
	for _, x := range w {
		sum += x
		f.cumWeight = append(f.cumWeight, sum)
	}
}

// arrivalAfter is the arrival time of request i, the one after prev.
func (f *fleet) arrivalAfter(i int, prev time.Duration) time.Duration {
	rate := f.sc.Arrivals.Rate
	if a := f.as; a != nil {
		// A rate that varies: Poisson arrivals by thinning at the peak rate.
		peak := rate * a.cfg.peakMult()
		if peak <= 0 {
			return math.MaxInt64
		}
		t := prev
		for {
			t += time.Duration(math.Round(f.arrivals.ExpFloat64() / peak * float64(time.Second)))
			if t >= f.sc.Duration || f.arrivals.Float64()*peak < a.rate(rate, t) {
				return t
			}
		}
	}
	if f.sc.Arrivals.Process == Constant {
		return time.Duration(math.Round(float64(i) / rate * float64(time.Second)))
	}
	return prev + time.Duration(math.Round(f.arrivals.ExpFloat64()/rate*float64(time.Second)))
}

func (f *fleet) run(ctx context.Context) error {
	end := f.sc.Duration
	for n := 0; ; n++ {
		if n&0xfff == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		next := time.Duration(math.MaxInt64)
		if len(f.heap) > 0 {
			next = f.reps[f.heap[0]].at
		}
		answerNext := len(f.answers) > 0 && f.answers[0].done <= next
		if answerNext {
			next = f.answers[0].done
		}
		// The rollout acts before any event at or after its instant, so
		// an evaluation at t sees the requests that ended before t.
		if ro := f.ro; ro != nil && ro.active() && ro.nextEval <= end &&
			ro.nextEval <= next && (f.nextArrival >= end || ro.nextEval <= f.nextArrival) {
			f.now = max(f.now, ro.nextEval)
			f.tick()
			continue
		}
		if a := f.as; a != nil && (a.due() <= end || len(f.heap) > 0) &&
			a.due() <= next && (f.nextArrival >= end || a.due() <= f.nextArrival) {
			f.now = max(f.now, a.due())
			a.tick(f)
			continue
		}
		if f.nextArrival < end && f.nextArrival <= next {
			f.now = f.nextArrival
			f.arrive(f.nextArrival)
			f.nextArrival = f.arrivalAfter(len(f.prompt), f.nextArrival)
			continue
		}
		if (len(f.heap) == 0 && len(f.answers) == 0) || (!f.sc.Drain && next > end) {
			break
		}
		f.now = next
		if answerNext {
			f.finishAnswer(f.popAnswer())
			continue
		}
		f.advance(f.pop())
	}
	// Evaluations due after the last event, up to the end.
	for f.ro != nil && f.ro.active() && f.ro.nextEval <= end {
		f.now = max(f.now, f.ro.nextEval)
		f.tick()
	}
	f.now = max(f.now, end)
	return nil
}

// tick runs the rollout's due evaluation and applies its split.
func (f *fleet) tick() {
	if f.ro.tick(f) {
		f.setWeights(f.ro.weights(f.sc.Versions))
	}
}

// arrive draws request number len(f.prompt), arriving at t, and routes it.
func (f *fleet) arrive(t time.Duration) {
	id := len(f.prompt)
	prompt := 0
	if f.sc.PromptTokens != (profile.LengthDist{}) { // none in a fleet without an LLM
		prompt = f.sc.PromptTokens.Draw(f.lengths)
	}
	out := 0
	if f.sc.OutputTokens != nil {
		out = f.sc.OutputTokens.Draw(f.lengths)
	}
	f.prompt = append(f.prompt, int32(min(prompt, math.MaxInt32)))
	f.promptSum += int64(prompt)
	f.outputSum += int64(out)

	tenant := -1
	if len(f.cumShare) > 0 {
		tenant = pick(f.cumShare, f.tenantRNG.Float64())
		f.ts[tenant].requests++
	}
	vi := pick(f.cumWeight, f.routing.Float64())
	v := &f.vs[vi]
	v.requests++

	reps := f.byVersion[vi]
	best, least := -1, math.MaxInt
	// From the round-robin start to the end, then from the beginning: the
	// first of the least outstanding in that order.
	start := 0
	if len(reps) > 0 {
		start = f.rr[vi] % len(reps)
	}
	for _, part := range [2][]int{reps[start:], reps[:start]} {
		for _, r := range part {
			if n := f.reps[r].outstanding; n < least {
				best, least = r, n
			}
		}
	}
	if best < 0 { // every replica of an autoscaled version draining
		v.rejected++
		return
	}
	f.rr[vi] = (f.rr[vi] + 1) % len(reps)
	if f.as != nil {
		f.as.arrived(f, best, t, prompt)
	}
	rep := &f.reps[best]
	if f.sc.ShedOutstanding > 0 && rep.outstanding >= f.sc.ShedOutstanding {
		v.shed++
		if f.as != nil {
			f.as.refused(t)
		}
		if f.ro != nil {
			f.ro.failed(vi, t)
		}
		return
	}
	if c := f.classics[vi]; c != nil {
		fail, lat, out := c.draw(f.predict)
		rep.outstanding++
		f.pushAnswer(answer{done: t + lat, arrival: t, replica: best, tenant: tenant, fail: fail, out: out})
		return
	}
	req := engine.Request{ID: strconv.Itoa(id), Arrival: t, PromptTokens: prompt, MaxTokens: f.sc.MaxTokens, OutputTokens: out}
	if tenant >= 0 {
		req.Tenant, req.Priority = f.sc.Tenants[tenant].Name, f.sc.Tenants[tenant].Priority
	}
	if err := rep.s.Submit(req); err != nil {
		v.rejected++
		if f.ro != nil {
			f.ro.failed(vi, t)
		}
		return
	}
	rep.outstanding++
	if !rep.scheduled {
		rep.at = t
		f.push(best)
	}
}

// pick returns the index whose cumulative weight first exceeds u × total.
func pick(cum []float64, u float64) int {
	x := u * cum[len(cum)-1]
	for i, c := range cum {
		if x < c {
			return i
		}
	}
	return len(cum) - 1
}

// advance handles replica r's event: the end of its step in flight, whose
// tokens and finished requests are handed out, then the start of its next
// step, if it has work.
func (f *fleet) advance(r int) {
	rep := &f.reps[r]
	if rep.step.res.Duration > 0 {
		f.account(rep, &rep.step.res)
	}
	for {
		res := rep.s.Step(rep.at)
		if res.Duration == 0 {
			if len(res.Preempted) > 0 {
				f.vs[rep.version].preemptions += len(res.Preempted)
				continue // evictions made room; the next step admits
			}
			rep.step.res = engine.StepResult{}
			return // idle until the next arrival pushes it again
		}
		rep.step.res = res
		f.sum(rep.step, rep.s.PageTokens())
		rep.step.res.Events = nil // f.events, which the next step overwrites
		rep.at = res.End()
		f.push(r)
		return
	}
}

// account hands out a finished step: latencies of the finished requests,
// and the step's share of the time averages.
func (f *fleet) account(rep *replica, res *engine.StepResult) {
	v := &f.vs[rep.version]
	warmup := f.sc.Warmup
	f.steps++
	sum := &rep.step.sum
	f.tokens += int64(sum.tokens)
	v.preemptions += len(res.Preempted)
	if rep.m != nil {
		rep.m.tokens += sum.tokens
	}
	for i := range res.Finished {
		fin := &res.Finished[i]
		rep.outstanding--
		if rep.m != nil {
			f.as.finished(fin)
		}
		v.completed++
		if fin.Done >= warmup {
			v.completedWindow++
		}
		var ts *tenantStats
		if t, ok := f.tenantIdx[fin.Tenant]; ok {
			ts = &f.ts[t]
			ts.completed++
		}
		if f.ro != nil {
			f.ro.finished(rep.version, fin.Arrival, fin.Done, fin.CompletionTokens, fin.TPOT(), warmup)
		}
		if fin.Arrival < warmup {
			continue
		}
		ttft, tpot := fin.TTFT(), fin.TPOT()
		v.ttft = append(v.ttft, ttft)
		v.e2e = append(v.e2e, fin.Done-fin.Arrival)
		if fin.CompletionTokens > 1 {
			v.tpot = append(v.tpot, tpot)
		}
		if ts != nil {
			ts.ttft = append(ts.ttft, ttft)
			if fin.CompletionTokens > 1 {
				ts.tpot = append(ts.tpot, tpot)
			}
		}
	}
	if res.Start < warmup {
		return
	}
	v.tokensWindow += int64(sum.tokens)
	if sum.pages != res.KVPagesUsed {
		f.pageErr++
	}
	d := res.Duration.Seconds()
	kv := float64(res.KVPagesUsed) / float64(rep.s.KVPages())
	v.batch += d * float64(res.Batch)
	v.kv += d * kv
	v.pagedSlots += d * float64(sum.pages*rep.s.PageTokens())
	v.held += d * float64(sum.held)
	for k := range f.sc.ContiguousMaxLen {
		v.contig[k] += d * float64(sum.contig[k])
	}
	v.maxBatch = max(v.maxBatch, res.Batch)
	v.maxKV = max(v.maxKV, kv)
}

// stepSum is what a step's events come to: the tokens it made and, for a
// step after the warmup, what the KV cache holds after it: the tokens and
// pages of every sequence that made a token and did not finish, and the
// slots a contiguous engine would reserve for them at each of
// ContiguousMaxLen.
type stepSum struct {
	tokens, held, pages int
	contig              [maxContiguousLen]int
}

// sum counts a step in flight as soon as it is planned, from its events in
// f.events, which the next replica's step overwrites: account hands the
// sum out at the step's end. pt is the replica's tokens a page.
func (f *fleet) sum(st *inFlight, pt int) {
	res := &st.res
	st.sum = stepSum{tokens: len(res.Events)}
	if res.Start < f.sc.Warmup {
		return
	}
	sum := &st.sum
	lens := f.sc.ContiguousMaxLen
	// Pages are counted with a shift where a page's tokens are a power of
	// two, as they are in every profile: a division for each token was 6 %
	// of the seed fleet's run.
	shift := -1
	if pt&(pt-1) == 0 {
		shift = bits.TrailingZeros(uint(pt))
	}
	for i := range res.Events {
		ev := &res.Events[i]
		if ev.Last {
			continue
		}
		n := ev.Tokens
		sum.held += n
		if shift >= 0 {
			sum.pages += (n + pt - 1) >> shift
		} else {
			sum.pages += (n + pt - 1) / pt
		}
		for k, l := range lens {
			sum.contig[k] += max(l, n)
		}
	}
}

func (f *fleet) report() Report {
	sc := f.sc
	measured := (f.now - sc.Warmup).Seconds()
	rep := Report{
		Scenario: sc.Name, Seed: sc.Seed, Process: sc.Arrivals.Process, Rate: sc.Arrivals.Rate, GPUs: sc.GPUs(),
		SimSeconds: f.now.Seconds(), MeasuredSeconds: measured,
		Requests: len(f.prompt), Steps: f.steps, Tokens: f.tokens,
	}
	if n := len(f.prompt); n > 0 {
		rep.MeanPromptTokens = float64(f.promptSum) / float64(n)
		rep.MeanOutputTokens = float64(f.outputSum) / float64(n)
	}
	var total float64
	for _, v := range sc.Versions {
		total += v.Weight
	}
	for vi, v := range sc.Versions {
		s := &f.vs[vi]
		pt := v.Profile.PageTokens
		vr := VersionReport{
			Name: v.Name, Kind: KindLLM, GPUs: v.GPUs, Share: v.Weight / total,
			KVPages: v.Profile.Pages(), PageTokens: pt,
			Requests: s.requests, Shed: s.shed, Rejected: s.rejected, Completed: s.completed,
			Errors:      s.errors,
			Unfinished:  s.requests - s.shed - s.rejected - s.completed - s.errors,
			TTFT:        latencyOf(s.ttft),
			TPOT:        latencyOf(s.tpot),
			E2E:         latencyOf(s.e2e),
			MaxBatch:    s.maxBatch,
			Preemptions: s.preemptions,
		}
		if f.classics[vi] != nil {
			vr.Kind = KindClassic
			vr.Output = outputStats(s.outN, s.outSum, s.outSumSq)
			vr.Contiguous = []Contiguous{}
		}
		for _, r := range f.byVersion[vi] {
			if f.reps[r].s == nil {
				continue
			}
			vr.GrowFailures += int(f.reps[r].s.Stats(f.now).GrowFailures)
		}
		if measured > 0 {
			gpuSecs := measured * float64(v.GPUs)
			if f.as != nil && f.as.vi == vi && f.as.gpuSeconds > 0 {
				gpuSecs = f.as.gpuSeconds // replicas come and go
			}
			vr.CompletedPerSecond = float64(s.completedWindow) / measured
			vr.TokensPerSecond = float64(s.tokensWindow) / measured
			vr.MeanBatch = s.batch / gpuSecs
			vr.KVUtilization = s.kv / gpuSecs
		}
		vr.MaxKVUtilization = s.maxKV
		if s.pagedSlots > 0 {
			vr.KVWastePagedPct = 100 * (s.pagedSlots - s.held) / s.pagedSlots
		}
		for k, l := range sc.ContiguousMaxLen {
			if pt == 0 {
				break // a classic version has no KV cache
			}
			c := Contiguous{MaxLen: l, SequencesPerGPU: vr.KVPages / ((l + pt - 1) / pt)}
			if s.contig[k] > 0 {
				c.WastePct = 100 * (s.contig[k] - s.held) / s.contig[k]
			}
			vr.Contiguous = append(vr.Contiguous, c)
		}
		if v.Claims != (Claims{}) {
			vr.Claims = &ClaimsReport{v.Claims.PagedSequencesPerGPU, v.Claims.ContiguousSequencesPerGPU, v.Claims.TPOTP99Ms}
		}
		rep.Versions = append(rep.Versions, vr)
	}
	if f.ro != nil {
		rep.Rollout = f.ro.report()
	}
	if f.as != nil {
		rep.Autoscale = f.as.report(f)
	}
	for i, t := range sc.Tenants {
		ts := &f.ts[i]
		rep.Tenants = append(rep.Tenants, TenantReport{Name: t.Name, Requests: ts.requests, Completed: ts.completed,
			TTFT: latencyOf(ts.ttft), TPOT: latencyOf(ts.tpot)})
	}
	return rep
}

// The heap of pending replica events, earliest first, by index on a tie.

func (f *fleet) before(a, b int) bool {
	ta, tb := f.reps[a].at, f.reps[b].at
	if ta != tb {
		return ta < tb
	}
	return a < b
}

func (f *fleet) push(r int) {
	f.reps[r].scheduled = true
	h := append(f.heap, r)
	i := len(h) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !f.before(h[i], h[p]) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
	f.heap = h
}

func (f *fleet) pop() int {
	h := f.heap
	r := h[0]
	last := len(h) - 1
	h[0] = h[last]
	h = h[:last]
	for i := 0; ; {
		l, m := 2*i+1, i
		if l < len(h) && f.before(h[l], h[m]) {
			m = l
		}
		if l+1 < len(h) && f.before(h[l+1], h[m]) {
			m = l + 1
		}
		if m == i {
			break
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
	f.heap = h
	f.reps[r].scheduled = false
	return r
}
