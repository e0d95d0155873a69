package scenario

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"modelplane/drift/stat"
	"modelplane/judge"
	"modelplane/sim/profile"
)

// minimalRollout is minimal with a second version and a rollout section
// that names only what has no default.
const minimalRollout = minimal + `  - name: v2
    gpus: 1
    weight: 0
    profile: {decode_base_ms: 10, kv_mb_per_token: 0.8, usable_gb: 1}
rollout:
  candidate: v2
  incumbent: v1
`

func TestParseRollout(t *testing.T) {
	t.Parallel()
	t.Run("defaults", func(t *testing.T) {
		t.Parallel()
		s, err := Parse([]byte(minimalRollout))
		if err != nil {
			t.Fatalf("Parse: %v", err)
		}
		want := &Rollout{Candidate: "v2", Incumbent: "v1", Steps: DefaultRolloutSteps,
			Interval: time.Minute, Window: 5 * time.Minute, Criteria: judge.DefaultCriteria("", 0, 0),
			SamplingRate: 1, DriftMinSamples: stat.DefaultMinSamples}
		if !reflect.DeepEqual(s.Rollout, want) {
			t.Errorf("rollout = %+v; want %+v", s.Rollout, want)
		}
		roundTrip(t, s)
	})
	t.Run("every key", func(t *testing.T) {
		t.Parallel()
		s, err := Parse([]byte(minimalRollout + `  start: 10s
  interval: 20s
  window: 1m
  steps: [{weight: 10, bake: 1m}, {weight: 50, bake: 2m}, {weight: 100}]
  criteria: {max_p99_ms: 900, max_p99_tpot_ms: 30, max_regression: 0.1, max_error_rate_delta: 1, min_requests: 50}
  compare_naive: true
`))
		if err != nil {
			t.Fatalf("Parse: %v", err)
		}
		want := &Rollout{Candidate: "v2", Incumbent: "v1", Start: 10 * time.Second,
			Steps:    []RolloutStep{{10, time.Minute}, {50, 2 * time.Minute}, {100, 0}},
			Interval: 20 * time.Second, Window: time.Minute,
			Criteria:     judge.Criteria{MaxP99MS: 900, MaxP99TPOTMS: 30, MaxRegression: 0.1, MaxErrorRateDelta: 1, MinRequests: 50},
			CompareNaive: true, SamplingRate: 1, DriftMinSamples: stat.DefaultMinSamples}
		if !reflect.DeepEqual(s.Rollout, want) {
			t.Errorf("rollout = %+v; want %+v", s.Rollout, want)
		}
		roundTrip(t, s)
	})
}

func TestParseRolloutErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, add, want string
		from, to        string // a replacement in minimalRollout
		add2            bool   // otherVersion added to the versions
	}{
		{name: "unknown key", add: "  bake: 1m\n", want: "rollout.bake (line 16): unknown key"},
		{name: "unknown candidate", from: "candidate: v2", to: "candidate: v9", want: "rollout.candidate: want the name of one of the versions"},
		{name: "candidate is incumbent", from: "candidate: v2", to: "candidate: v1", want: "rollout.incumbent: want a version other than the candidate"},
		{name: "pair without traffic", from: "gpus: 2\n", to: "gpus: 2\n    weight: 0\n", add2: true, want: "rollout.candidate: the candidate's and incumbent's weights are both 0"},
		{name: "start past the end", add: "  start: 30s\n", want: "rollout.start: want whole seconds"},
		{name: "start not whole", add: "  start: 1500ms\n", want: "rollout.start: want whole seconds"},
		{name: "interval zero seconds", add: "  interval: 500ms\n", want: "rollout.interval: want whole seconds, 1s to 1h0m0s"},
		{name: "window too long", add: "  window: 2h\n", want: "rollout.window: want whole seconds, 1s to 1h0m0s"},
		{name: "one step", add: "  steps: [{weight: 100}]\n", want: "rollout.steps: want 2 to 32 steps"},
		{name: "steps not increasing", add: "  steps: [{weight: 5}, {weight: 5}, {weight: 100}]\n", want: "rollout.steps[1].weight: want a percent above the step before's (5)"},
		{name: "last step not 100", add: "  steps: [{weight: 5}, {weight: 50}]\n", want: "rollout.steps[1].weight: want 100"},
		{name: "bake negative", add: "  steps: [{weight: 5, bake: -1m}, {weight: 100}]\n", want: "rollout.steps[0].bake: want 0s to"},
		{name: "step key", add: "  steps: [{percent: 5}, {weight: 100}]\n", want: "rollout.steps[0].percent (line 16): unknown key"},
		{name: "criteria regression", add: "  criteria: {max_regression: -0.1}\n", want: "rollout.criteria.max_regression: must be a fraction"},
		{name: "criteria min requests", add: "  criteria: {min_requests: 0}\n", want: "rollout.criteria.min_requests (line 16): want a whole number of at least 1"},
		{name: "criteria drift on LLMs", add: "  criteria: {drift: true}\n", want: "rollout.criteria.drift: the simulation measures output drift of classifiers and regressors only"},
		{name: "criteria drift not a bool", add: "  criteria: {drift: 1}\n", want: "rollout.criteria.drift (line 16): want true or false"},
		{name: "sampling rate zero", add: "  sampling_rate: 0.0\n", want: "rollout.sampling_rate (line 16): want a share above 0"},
		{name: "sampling rate above 1", add: "  sampling_rate: 1.5\n", want: "rollout.sampling_rate: want a share above 0, at most 1"},
		{name: "sampling rate negative", add: "  sampling_rate: -0.1\n", want: "rollout.sampling_rate: want a share above 0, at most 1"},
		{name: "drift min samples zero", add: "  drift_min_samples: 0\n", want: "rollout.drift_min_samples"},
		{name: "drift min samples not whole", add: "  drift_min_samples: 2.5\n", want: "rollout.drift_min_samples (line 16): want a whole number"},
		{name: "candidate classic, incumbent LLM", from: "    weight: 0\n    profile: {decode_base_ms: 10, kv_mb_per_token: 0.8, usable_gb: 1}",
			to: "    weight: 0\n    profile: {latency_ms: {p50: 8, p99: 21}, score: {mean: 0.12, sd: 0.18}}", want: "rollout.candidate: one of the candidate and incumbent is an LLM"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			doc := minimalRollout + tt.add
			if tt.from != "" {
				doc = strings.Replace(doc, tt.from, tt.to, 1)
			}
			if tt.add2 {
				doc = strings.Replace(doc, "rollout:\n", otherVersion+"rollout:\n", 1)
			}
			_, err := Parse([]byte(doc))
			if err == nil {
				t.Fatalf("Parse succeeded; want an error with %q", tt.want)
			}
			if !errors.Is(err, ErrInvalidScenario) {
				t.Errorf("error %v does not wrap ErrInvalidScenario", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q; want it to contain %q", err, tt.want)
			}
		})
	}
	t.Run("drift set in Go", func(t *testing.T) {
		t.Parallel()
		s := slowCanary(1)
		s.Rollout.Criteria.Drift = true
		if err := s.WithDefaults().Validate(); err == nil || !strings.Contains(err.Error(), "rollout.criteria.drift") {
			t.Errorf("Validate = %v; want rollout.criteria.drift refused", err)
		}
	})
}

// otherVersion is a third version with traffic of its own.
const otherVersion = `  - name: v3
    gpus: 1
    profile: {decode_base_ms: 10, kv_mb_per_token: 0.8, usable_gb: 1}
`

// slowCanary is smallCanary under a rollout: v43 (TPOT p50 over 23 ms)
// against an SLA of 30 ms p99 TPOT, from 10 percent, every 10 s over 30 s.
func slowCanary(seed uint64) Scenario {
	s := smallCanary(seed)
	s.Duration = 90 * time.Second
	s.Rollout = &Rollout{Candidate: "v43", Incumbent: "v42", Start: 5 * time.Second,
		Steps:    []RolloutStep{{10, time.Minute}, {25, time.Minute}, {50, time.Minute}, {100, 0}},
		Interval: 10 * time.Second, Window: 30 * time.Second,
		Criteria:     judge.Criteria{MaxP99TPOTMS: 30, MaxRegression: 0.2, MaxErrorRateDelta: 0.5, MinRequests: 15},
		CompareNaive: true}
	return s
}

// TestRolloutRollsBackSlowCanary is the seed's canary at a test's scale:
// the judge rolls v43 back with no human within three evaluations, v43
// gets no request after the rollback, the incumbent's TPOT does not move,
// and the naive flip shows what everyone would have seen.
func TestRolloutRollsBackSlowCanary(t *testing.T) {
	t.Parallel()
	for _, seed := range []uint64{1, 2, 3} {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			t.Parallel()
			s := slowCanary(seed)
			rep := run(t, s)
			ro := rep.Rollout
			if ro == nil {
				t.Fatal("report has no rollout")
			}
			rb := ro.Rollback
			if ro.State != RolloutRolledBack || rb == nil {
				t.Fatalf("state %s; want rolled_back; timeline %+v", ro.State, ro.Timeline)
			}
			t.Logf("rolled back at %.0f s: %s; v43 %d requests (%.1f/s); v42 TPOT p99 before %.2f after %.2f; naive p99 %.2f",
				rb.AtSeconds, rb.Verdict.Reason, rb.CandidateRequests, rb.CandidatePerSecond,
				rb.IncumbentTPOTBefore.P99, rb.IncumbentTPOTAfter.P99, ro.Naive.TPOT.P99)
			if limit := 3 * s.Rollout.Interval.Seconds(); rb.AfterStartSeconds > limit {
				t.Errorf("rolled back %.0f s after the start; want within three evaluations, %.0f s", rb.AfterStartSeconds, limit)
			}
			if rb.Verdict.Decision != judge.Rollback || !strings.HasPrefix(rb.Verdict.Reason, "p99_tpot_ms") {
				t.Errorf("verdict %s %q; want rollback on p99_tpot_ms", rb.Verdict.Decision, rb.Verdict.Reason)
			}
			// v43 on two lightly loaded GPUs: its p99 TPOT is over v42's by
			// more than 20 percent before it reaches the 30 ms SLA.
			cw, iw := rb.CandidateWindow, rb.IncumbentWindow
			if (cw.P99TPOTMS <= 30 && cw.P99TPOTMS <= 1.2*iw.P99TPOTMS) || cw.Streams < s.Rollout.Criteria.MinRequests {
				t.Errorf("candidate window %+v, incumbent %+v; want p99 TPOT over 30 ms or over the incumbent's + 20%% on at least %d streams",
					cw, iw, s.Rollout.Criteria.MinRequests)
			}
			if ro.WeightPct != 0 || ro.MaxWeightPct != 10 {
				t.Errorf("weight %g%%, at most %g%%; want 0 after the rollback, 10 at most", ro.WeightPct, ro.MaxWeightPct)
			}
			v43, _ := rep.Version("v43")
			if v43.Requests != rb.CandidateRequests || v43.Requests == 0 {
				t.Errorf("v43 got %d requests in the run, %d before the rollback; want them equal and above 0", v43.Requests, rb.CandidateRequests)
			}
			before, after := rb.IncumbentTPOTBefore, rb.IncumbentTPOTAfter
			if before.N == 0 || after.N == 0 {
				t.Fatalf("incumbent TPOT samples before %d, after %d; want both", before.N, after.N)
			}
			if d := after.P99 - before.P99; d > 0.1*before.P99 || d < -0.1*before.P99 {
				t.Errorf("incumbent p99 TPOT %.2f ms before, %.2f after; want within 10 percent", before.P99, after.P99)
			}
			n := ro.Naive
			if n == nil || !n.OverSLA || n.TPOT.P99 <= 30 || n.GPUs != 8 {
				t.Errorf("naive %+v; want 8 GPUs with p99 TPOT over the 30 ms SLA", n)
			}
		})
	}
}

// healthyCanary is a candidate identical to the incumbent, scaled down so
// that 20 runs fit a test: 20 req/s on 5 + 5 GPUs (the seed's scale is
// 1,000 req/s on 150 GPUs, and its 10-minute bakes would take minutes of
// wall time per run), steps of 10, 25 and 50 percent with 40-second bakes
// (the seed's first step of 1 percent would need minutes per window at
// this rate to see the minimum requests), an evaluation every 20 s over
// the last 40 s, and the seed's criteria with min_requests 50; the
// approval wait comes at 130 s at the earliest, the run lasts 150 s, and
// it makes no naive comparison (which would double its cost).
func healthyCanary(seed uint64) Scenario {
	return Scenario{
		Name: "healthy-canary", Seed: seed, Duration: 150 * time.Second, Warmup: 10 * time.Second,
		Arrivals:     Arrivals{Process: Poisson, Rate: 20},
		PromptTokens: profile.LengthDist{Mean: 500, SD: 300, Max: 1536},
		OutputTokens: &profile.LengthDist{Mean: 200, SD: 150, Max: 512},
		Versions: []Version{
			{Name: "v42", GPUs: 5, Weight: 100, Profile: v42},
			{Name: "v42-copy", GPUs: 5, Weight: 0, Profile: v42},
		},
		Rollout: &Rollout{Candidate: "v42-copy", Incumbent: "v42", Start: 10 * time.Second,
			Steps:    []RolloutStep{{10, 40 * time.Second}, {25, 40 * time.Second}, {50, 40 * time.Second}, {100, 0}},
			Interval: 20 * time.Second, Window: 40 * time.Second,
			Criteria: judge.Criteria{MaxP99TPOTMS: 30, MaxRegression: 0.2, MaxErrorRateDelta: 0.5, MinRequests: 50}},
	}
}

// TestRolloutHealthyCandidate: over 20 seeds a candidate identical to the
// incumbent is never rolled back, passes every step, and stops before 100
// percent to wait for approval.
func TestRolloutHealthyCandidate(t *testing.T) {
	t.Parallel()
	for seed := uint64(1); seed <= 20; seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			t.Parallel()
			rep := run(t, healthyCanary(seed))
			ro := rep.Rollout
			var advances []float64
			for _, e := range ro.Timeline {
				switch e.Decision {
				case string(judge.Rollback):
					t.Fatalf("spurious rollback at %.0f s: %s", e.AtSeconds, e.Reason)
				case string(judge.Advance):
					advances = append(advances, e.WeightPct)
				}
			}
			if ro.State != RolloutWaiting || ro.WaitingSinceSeconds == nil {
				t.Fatalf("state %s; want waiting_for_approval; timeline %+v", ro.State, ro.Timeline)
			}
			if ro.MaxWeightPct != 50 || ro.WeightPct != 50 || ro.Step != 3 {
				t.Errorf("step %d at %g%%, at most %g%%; want step 3 at 50%%, never 100", ro.Step, ro.WeightPct, ro.MaxWeightPct)
			}
			// 10 → 25, 25 → 50, then 50 passes and waits; evaluations after
			// that may advance again, which changes nothing.
			if len(advances) < 3 || advances[0] != 25 || advances[1] != 50 || advances[2] != 50 {
				t.Errorf("advances to %v; want 25, 50, then waiting at 50", advances)
			}
			if ro.Naive != nil {
				t.Errorf("naive flip %+v; want none without compare_naive", ro.Naive)
			}
		})
	}
}

// TestRolloutWindows: an evaluation counts the requests that ended in
// [t - window, t), no earlier than the step's start, with their latency
// and TPOT in the histograms, and a shed request as a request and an
// error.
func TestRolloutWindows(t *testing.T) {
	t.Parallel()
	s := slowCanary(1).WithDefaults()
	rr := newRolloutRun(s)
	cand, inc := rr.cand, rr.inc
	rr.finished(cand, 0, 2*time.Second, 10, 40*time.Millisecond, 0)  // too early
	rr.finished(cand, 0, 12*time.Second, 10, 40*time.Millisecond, 0) // in
	rr.finished(cand, 0, 39*time.Second, 1, 0, 0)                    // in, no stream
	rr.failed(cand, 20*time.Second)                                  // in, error
	rr.finished(cand, 0, 40*time.Second, 10, 40*time.Millisecond, 0) // at the end: next window
	rr.finished(inc, 0, 15*time.Second, 10, 20*time.Millisecond, 0)
	w := window(rr.side(cand), 10*time.Second, 40*time.Second)
	if w.Requests != 3 || w.Errors != 1 || w.Streams != 1 {
		t.Errorf("candidate window requests/errors/streams %d/%d/%d; want 3/1/1", w.Requests, w.Errors, w.Streams)
	}
	var tpot uint64
	for _, n := range w.TPOT {
		tpot += n
	}
	if tpot != 1 {
		t.Errorf("TPOT histogram holds %d; want 1", tpot)
	}
	if wi := window(rr.side(inc), 10*time.Second, 40*time.Second); wi.Requests != 1 || wi.Streams != 1 {
		t.Errorf("incumbent window %d requests, %d streams; want 1, 1", wi.Requests, wi.Streams)
	}
}

// TestRolloutDeterminism: a rollout run is a pure function of its scenario.
func TestRolloutDeterminism(t *testing.T) {
	t.Parallel()
	a, b := run(t, slowCanary(7)), run(t, slowCanary(7))
	if !reflect.DeepEqual(a, b) {
		t.Errorf("two runs of one scenario differ:\n%+v\n%+v", a.Rollout, b.Rollout)
	}
}

// TestSeedCanaryBuiltin pins the seed-canary built-in's rollout: v43 at 1
// percent with a 10-minute bake, judged every minute over 5 minutes against
// 30 ms. Running it takes seconds (the command's job, not a test's).
func TestSeedCanaryBuiltin(t *testing.T) {
	t.Parallel()
	s, err := Builtin("seed-canary")
	if err != nil {
		t.Fatal(err)
	}
	r := s.Rollout
	if r == nil || r.Candidate != "v43" || r.Incumbent != "v42" || r.Steps[0] != (RolloutStep{1, 10 * time.Minute}) ||
		r.Interval != time.Minute || r.Window != 5*time.Minute || r.Criteria.MaxP99TPOTMS != 30 || !r.CompareNaive {
		t.Errorf("seed-canary rollout %+v; want v43 over v42 from 1%% for 10m, every 1m over 5m, p99 TPOT 30 ms", r)
	}
}
