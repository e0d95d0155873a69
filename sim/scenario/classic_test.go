package scenario

import (
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"modelplane/drift/stat"
	"modelplane/judge"
	"modelplane/sim/profile"
)

// The seed documents' fraud model (app/demo.go's profiles): v23 scores
// mostly low, v24 near-uniformly, both equally fast and error-free.
var (
	v23 = profile.Profile{LatencyMs: &profile.Latency{P50: 8, P99: 21}, ErrorRate: 0.001, Score: &profile.Moments{Mean: 0.12, SD: 0.18},
		ClassBalance: profile.ClassBalance{{Label: "legit", Share: 0.97}, {Label: "fraud", Share: 0.03}}}
	v24 = profile.Profile{LatencyMs: &profile.Latency{P50: 8, P99: 21}, ErrorRate: 0.001, Score: &profile.Moments{Mean: 0.49, SD: 0.28},
		ClassBalance: profile.ClassBalance{{Label: "legit", Share: 0.6}, {Label: "fraud", Share: 0.4}}}
)

const classicRollout = `
duration: 3m
arrivals: {rate: 50}
versions:
  - name: v23
    gpus: 2
    weight: 95
    profile: {latency_ms: {p50: 8, p99: 21}, error_rate: 0.001, score: {mean: 0.12, sd: 0.18}}
  - name: v24
    gpus: 1
    weight: 5
    profile: {latency_ms: {p50: 8, p99: 21}, score: {mean: 0.49, sd: 0.28}}
rollout:
  candidate: v24
  incumbent: v23
  steps: [{weight: 5, bake: 1m}, {weight: 100}]
  criteria: {max_p99_ms: 50, drift: true}
  sampling_rate: 0.25
  drift_min_samples: 50
`

func TestParseClassicRollout(t *testing.T) {
	t.Parallel()
	s, err := Parse([]byte(classicRollout))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if s.PromptTokens != (profile.LengthDist{}) {
		t.Errorf("prompt_tokens %+v; want none for a fleet without an LLM", s.PromptTokens)
	}
	want := judge.DefaultCriteria("", 50, 0)
	want.Drift = true
	r := s.Rollout
	if r.Criteria != want || r.SamplingRate != 0.25 || r.DriftMinSamples != 50 {
		t.Errorf("criteria %+v, sampling %g, min samples %d; want %+v, 0.25, 50", r.Criteria, r.SamplingRate, r.DriftMinSamples, want)
	}
	if p := s.Versions[1].Profile; !isClassic(p) || p.Score == nil || *p.Score != (profile.Moments{Mean: 0.49, SD: 0.28}) {
		t.Errorf("v24 profile %+v; want a classic profile with score 0.49/0.28", p)
	}
	roundTrip(t, s)

	// Without the rollout's keys: the defaults.
	s, err = Parse([]byte(strings.Replace(strings.Replace(classicRollout, "  sampling_rate: 0.25\n", "", 1), "  drift_min_samples: 50\n", "", 1)))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if s.Rollout.SamplingRate != 1 || s.Rollout.DriftMinSamples != stat.DefaultMinSamples {
		t.Errorf("sampling %g, min samples %d; want 1 and %d by default", s.Rollout.SamplingRate, s.Rollout.DriftMinSamples, stat.DefaultMinSamples)
	}
}

// TestClassicDraws: a classic version answers with the profile's latency
// percentiles, error rate and score (or value) moments.
func TestClassicDraws(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name           string
		profile        profile.Profile
		mean, sd       float64
		p50, p99, errs float64
	}{
		{"v23 scores", v23, 0.12, 0.18, 8, 21, 0.001},
		{"v24 scores", v24, 0.49, 0.28, 8, 21, 0.001},
		{"regression values", profile.Profile{LatencyMs: &profile.Latency{P50: 30, P99: 90}, ErrorRate: 0.02, Value: &profile.Moments{Mean: 120, SD: 40}}, 120, 40, 30, 90, 0.02},
		{"no latency", profile.Profile{Score: &profile.Moments{Mean: 0.3, SD: 0.1}}, 0.3, 0.1, 0, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rep := run(t, Scenario{Name: "classic", Seed: 3, Duration: time.Minute, Arrivals: Arrivals{Rate: 2000},
				Versions: []Version{{Name: "m", GPUs: 2, Weight: 1, Profile: tt.profile}}})
			v := rep.Versions[0]
			if v.Kind != KindClassic || v.Output == nil {
				t.Fatalf("version %+v; want kind classic with outputs", v)
			}
			if v.Completed+v.Errors+v.Unfinished != v.Requests || v.Shed+v.Rejected != 0 {
				t.Errorf("requests %d = completed %d + errors %d + unfinished %d (shed %d, rejected %d); want them to add up, none refused",
					v.Requests, v.Completed, v.Errors, v.Unfinished, v.Shed, v.Rejected)
			}
			if o := v.Output; o.N != v.Completed || math.Abs(o.Mean-tt.mean) > 0.02*tt.sd*10 || math.Abs(o.SD-tt.sd) > 0.03*tt.sd {
				t.Errorf("outputs n %d mean %.4f sd %.4f; want %d answers with mean %g and sd %g", o.N, o.Mean, o.SD, v.Completed, tt.mean, tt.sd)
			}
			if math.Abs(v.E2E.P50-tt.p50) > 0.05*tt.p50 || math.Abs(v.E2E.P99-tt.p99) > 0.1*tt.p99 {
				t.Errorf("latency p50 %.2f p99 %.2f ms; want about %g and %g", v.E2E.P50, v.E2E.P99, tt.p50, tt.p99)
			}
			if rate := float64(v.Errors) / float64(v.Requests); math.Abs(rate-tt.errs) > 0.3*tt.errs+1e-9 {
				t.Errorf("error rate %.5f; want about %g", rate, tt.errs)
			}
			if limit := int(2*2000*tt.p99/1000) + 10; v.Unfinished > limit {
				t.Errorf("%d unfinished; want only those in flight at the end (at most %d)", v.Unfinished, limit)
			}
		})
	}
}

// TestClassicDeterminism: a classic run is a pure function of the
// scenario; another seed draws other answers.
func TestClassicDeterminism(t *testing.T) {
	t.Parallel()
	a, b := run(t, garbageSmall(4)), run(t, garbageSmall(4))
	if !reflect.DeepEqual(a, b) {
		t.Errorf("two runs of one scenario differ:\n%+v\n%+v", a.Rollout, b.Rollout)
	}
	if c := run(t, garbageSmall(5)); reflect.DeepEqual(a.Versions, c.Versions) {
		t.Error("seeds 4 and 5 give the same versions' report")
	}
}

// TestMeasureDrift: the drift the gate measures is package drift's
// normalised W1 over the quantile grid, close to the exact distance,
// zero for identical samples, and not judged below the minimum samples.
func TestMeasureDrift(t *testing.T) {
	t.Parallel()
	ref := make([]float64, 4000)
	for i := range ref {
		ref[i] = float64(i%100) / 100 // uniform on 0 .. 0.99
	}
	_, sd := stat.MeanStd(ref)
	shifted := make([]float64, len(ref))
	for i, x := range ref {
		shifted[i] = x + 0.1
	}
	if d := measureDrift(ref, ref, 200); d.Value != 0 || !d.Enough || d.Metric != stat.MetricW1 || d.Threshold != stat.W1Threshold {
		t.Errorf("identical samples: %+v; want w1_norm 0 against 0.2, enough", d)
	}
	d := measureDrift(shifted, ref, 200)
	if math.Abs(d.W1-0.1) > 1e-9 || math.Abs(d.Value-0.1/sd) > 1e-9 || d.Spread != sd {
		t.Errorf("shift by 0.1: W1 %.6f value %.6f spread %.6f; want 0.1, %.6f, %.6f", d.W1, d.Value, d.Spread, 0.1/sd, sd)
	}
	if exact := stat.Wasserstein1(shifted, ref); math.Abs(d.W1-exact) > 0.01*exact {
		t.Errorf("grid W1 %.6f; want within 1%% of the exact %.6f", d.W1, exact)
	}
	if d := measureDrift(shifted[:199], ref, 200); d.Enough || d.CandidateSamples != 199 || d.IncumbentSamples != 4000 {
		t.Errorf("199 candidate samples: %+v; want not enough, counts 199 and 4000", d)
	}
	if d := measureDrift(nil, ref, 200); d.Enough || d.Value != 0 {
		t.Errorf("no candidate samples: %+v; want not enough, value 0", d)
	}
}

// TestRolloutAnswered: a classic answer is counted in the second it ended,
// a failure as a request and an error with no sample, and outputs are
// sampled at the sampling rate.
func TestRolloutAnswered(t *testing.T) {
	t.Parallel()
	s, err := Parse([]byte(classicRollout))
	if err != nil {
		t.Fatal(err)
	}
	f, err := newFleet(s)
	if err != nil {
		t.Fatal(err)
	}
	rr := f.ro
	cand := rr.cand
	rr.answered(f, cand, answer{arrival: 0, done: 12 * time.Second, out: 0.4})
	rr.answered(f, cand, answer{arrival: 0, done: 13 * time.Second, fail: true, out: 0.9})
	w := window(rr.side(cand), 10*time.Second, 20*time.Second)
	if w.Requests != 2 || w.Errors != 1 {
		t.Errorf("window requests/errors %d/%d; want 2/1", w.Requests, w.Errors)
	}
	for i := range 4000 {
		rr.answered(f, rr.inc, answer{arrival: 0, done: 15 * time.Second, out: float64(i)})
	}
	n := len(outputs(rr.side(rr.inc), 10*time.Second, 20*time.Second))
	if n < 850 || n > 1150 {
		t.Errorf("%d of 4000 answers sampled at 0.25; want about 1000", n)
	}
	if got := outputs(rr.side(cand), 10*time.Second, 20*time.Second); len(got) > 1 || (len(got) == 1 && got[0] != 0.4) {
		t.Errorf("candidate samples %v; want at most the successful answer's 0.4", got)
	}
}

// garbageSmall is seed-garbage made shorter for tests: the same fleet,
// load, rollout and criteria for 4 minutes (the rollback comes at the first
// evaluation, a minute after the start), without the no-gate contrast.
func garbageSmall(seed uint64) Scenario {
	s, err := Builtin("seed-garbage")
	if err != nil {
		panic(err)
	}
	s.Seed, s.Duration = seed, 4*time.Minute
	r := *s.Rollout
	r.CompareNaive = false
	s.Rollout = &r
	return s
}

// checkGarbageRollback asserts the walkthrough's outcome: rolled back on
// drift with the latency and error checks passing, v24 exposed only until
// then.
func checkGarbageRollback(t *testing.T, rep Report) {
	t.Helper()
	ro := rep.Rollout
	rb := ro.Rollback
	if ro.State != RolloutRolledBack || rb == nil {
		t.Fatalf("state %s; want rolled_back; timeline %+v", ro.State, ro.Timeline)
	}
	if rb.Trigger != "drift" || rb.Verdict.Decision != judge.Rollback {
		t.Errorf("rollback on %q (%s); want drift", rb.Trigger, rb.Verdict.Reason)
	}
	seen := map[string]judge.Outcome{}
	for _, ch := range rb.Verdict.Checks {
		seen[ch.Name] = ch.Outcome
	}
	want := map[string]judge.Outcome{"requests": judge.Pass, "error_rate_delta_pct": judge.Pass, "p99_latency_ms": judge.Pass,
		"p99_latency_ms_regression": judge.Pass, "drift": judge.Fail}
	if !reflect.DeepEqual(seen, want) {
		t.Errorf("checks %v; want %v", seen, want)
	}
	d := rb.Drift
	if d == nil || !d.Enough || d.Value <= 1 || d.Threshold != stat.W1Threshold ||
		d.CandidateSamples < uint64(d.MinSamples) || d.IncumbentSamples < uint64(d.MinSamples) {
		t.Fatalf("drift %+v; want w1_norm well past 0.2 on enough samples", d)
	}
	if math.Abs(d.CandidateMean-0.49) > 0.05 || math.Abs(d.IncumbentMean-0.12) > 0.02 {
		t.Errorf("sampled means %.3f and %.3f; want about 0.49 and 0.12", d.CandidateMean, d.IncumbentMean)
	}
	if rb.AfterStartSeconds > 3*ro.IntervalSeconds {
		t.Errorf("rolled back %.0f s after the start; want within three evaluations", rb.AfterStartSeconds)
	}
	c, _ := rep.Version(ro.Candidate)
	if c.Requests != rb.CandidateRequests || c.Requests == 0 || ro.WeightPct != 0 || ro.MaxWeightPct != 5 {
		t.Errorf("v24 %d requests, %d before the rollback, weight %g%% (at most %g%%); want equal, above 0, 0%% after, 5%% at most",
			c.Requests, rb.CandidateRequests, ro.WeightPct, ro.MaxWeightPct)
	}
	i, _ := rep.Version(ro.Incumbent)
	if c.Output == nil || i.Output == nil || math.Abs(c.Output.Mean-0.49) > 0.03 || math.Abs(i.Output.Mean-0.12) > 0.01 ||
		math.Abs(c.Output.SD-0.28) > 0.03 || math.Abs(i.Output.SD-0.18) > 0.01 {
		t.Errorf("outputs v24 %+v, v23 %+v; want about 0.49/0.28 and 0.12/0.18", c.Output, i.Output)
	}
}

// TestSeedGarbage is walkthrough 2 at the seed's scale (1,000 req/s, a 5
// percent canary, evaluations every minute over 5 minutes), seeds 1 to 3
// over the built-in's first 4 minutes: the rollback comes at the first
// evaluation, 60 s after the start. The built-in's 32 minutes and its
// no-gate contrast (3.8 million requests, seconds of wall time, minutes
// under the race detector) are the command's job; the contrast is checked
// by TestSeedGarbageNoGate on shorter bakes.
func TestSeedGarbage(t *testing.T) {
	t.Parallel()
	s, err := Builtin("seed-garbage")
	if err != nil {
		t.Fatal(err)
	}
	r := s.Rollout
	if s.Arrivals.Rate != 1000 || r.Steps[0].Weight != 5 || r.Steps[0].Bake != 10*time.Minute || !r.Criteria.Drift ||
		r.SamplingRate != 0.1 || r.DriftMinSamples != stat.DefaultMinSamples || !r.CompareNaive || r.Criteria.MaxP99MS != 50 {
		t.Errorf("seed-garbage %+v, rollout %+v; want 1,000 req/s, 5 percent for 10 minutes, drift gate on sampling a tenth, 200 samples, the contrast", s.Arrivals, r)
	}
	if !reflect.DeepEqual(s.Versions[0].Profile, v23) || !reflect.DeepEqual(s.Versions[1].Profile, v24) {
		t.Errorf("profiles %+v, %+v; want app/demo.go's v23 and v24", s.Versions[0].Profile, s.Versions[1].Profile)
	}
	for _, seed := range []uint64{1, 2, 3} {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			t.Parallel()
			rep := run(t, garbageSmall(seed))
			checkGarbageRollback(t, rep)
			rb := rep.Rollout.Rollback
			t.Logf("rolled back at %.0f s: %s; v24 served %d", rb.AtSeconds, rb.Verdict.Reason, rb.CandidateRequests)
			if seed != 1 {
				return
			}
			var text strings.Builder
			if err := rep.WriteText(&text); err != nil {
				t.Fatal(err)
			}
			for _, want := range []string{"drift at the rollback: w1_norm", "classic versions", "requests/p99 latency"} {
				if !strings.Contains(text.String(), want) {
					t.Errorf("text report lacks %q:\n%s", want, text.String())
				}
			}
		})
	}
}

// TestSeedGarbageNoGate: the contrast of seed-garbage with 1-minute bakes
// over 4 minutes. With the drift gate v24 is rolled back at the first
// evaluation; without it every check passes and it goes to 50 percent and
// waits for approval, having served far more garbage scores.
func TestSeedGarbageNoGate(t *testing.T) {
	t.Parallel()
	s := garbageSmall(1)
	r := *s.Rollout
	r.CompareNaive = true
	r.Steps = []RolloutStep{{5, time.Minute}, {25, time.Minute}, {50, time.Minute}, {100, 0}}
	s.Rollout = &r
	rep := run(t, s)
	checkGarbageRollback(t, rep)
	ro := rep.Rollout
	ng := ro.NoDriftGate
	if ng == nil || ng.State != RolloutWaiting || ng.MaxWeightPct != 50 || ng.WaitingSinceSeconds == nil {
		t.Fatalf("without the drift gate %+v; want waiting for approval at 50 percent", ng)
	}
	if ng.CandidateRequests <= 10*ro.Rollback.CandidateRequests || ng.CandidateOutput == nil ||
		math.Abs(ng.CandidateOutput.Mean-0.49) > 0.01 || math.Abs(ng.IncumbentOutput.Mean-0.12) > 0.01 {
		t.Errorf("without the gate v24 served %d (gate: %d), outputs %+v (v23 %+v); want over 10 times as many garbage scores, mean about 0.49",
			ng.CandidateRequests, ro.Rollback.CandidateRequests, ng.CandidateOutput, ng.IncumbentOutput)
	}
	if ro.Naive != nil {
		t.Errorf("naive flip %+v; want the no-gate contrast instead for a drift rollout", ro.Naive)
	}
	var text strings.Builder
	if err := rep.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), "without the drift gate: waiting_for_approval at step 3, 50%") {
		t.Errorf("text report lacks the contrast:\n%s", text.String())
	}
}

// healthyTwin is seed-garbage with the candidate given v23's own profile,
// scaled down so 20 runs fit a test: 400 req/s instead of 1,000 on 4 + 1
// GPUs for 150 s, steps of 5, 25 and 50 percent baking 40 s (the seed's 10
// minutes would take minutes of wall time per run), an evaluation every
// 20 s over 40 s, every answer sampled (at 5 percent of 400 req/s a 40 s
// window holds about 800 candidate answers, four minimum sample counts),
// and no contrast run. min_requests is 500, not the default 100: on 100
// to 200 requests one or two of v23's 0.1 percent errors, or a p99 read
// from two requests, fail the error and latency checks of an identical
// twin (seen on seeds 1, 4 and 11), which is not what this test is about.
func healthyTwin(seed uint64) Scenario {
	return Scenario{
		Name: "healthy-twin", Seed: seed, Duration: 150 * time.Second, Warmup: 10 * time.Second,
		Arrivals: Arrivals{Process: Poisson, Rate: 400},
		Versions: []Version{
			{Name: "v23", GPUs: 4, Weight: 95, Profile: v23},
			{Name: "v23-twin", GPUs: 1, Weight: 5, Profile: v23},
		},
		Rollout: &Rollout{Candidate: "v23-twin", Incumbent: "v23", Start: 10 * time.Second,
			Steps:    []RolloutStep{{5, 40 * time.Second}, {25, 40 * time.Second}, {50, 40 * time.Second}, {100, 0}},
			Interval: 20 * time.Second, Window: 40 * time.Second, SamplingRate: 1,
			Criteria: judge.Criteria{MaxP99MS: 50, MaxRegression: 0.2, MaxErrorRateDelta: 0.5, MinRequests: 500, Drift: true}},
	}
}

// TestGarbageHealthyTwin: over 20 seeds a candidate identical to v23 never
// trips the drift gate (nor any other), and the rollout stops at 50
// percent waiting for approval.
func TestGarbageHealthyTwin(t *testing.T) {
	t.Parallel()
	for seed := uint64(1); seed <= 20; seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			t.Parallel()
			ro := run(t, healthyTwin(seed)).Rollout
			measured, worst := 0, 0.0
			for _, e := range ro.Timeline {
				if e.Decision == string(judge.Rollback) {
					t.Fatalf("spurious rollback at %.0f s: %s", e.AtSeconds, e.Reason)
				}
				if d := e.Drift; d != nil && d.Enough {
					measured++
					worst = max(worst, d.Value)
				}
			}
			if ro.State != RolloutWaiting || ro.MaxWeightPct != 50 {
				t.Fatalf("state %s at most %g%%; want waiting_for_approval at 50; timeline %+v", ro.State, ro.MaxWeightPct, ro.Timeline)
			}
			t.Logf("%d evaluations measured drift, the largest w1_norm %.3f", measured, worst)
			if measured < 3 || worst >= stat.W1Threshold {
				t.Errorf("%d evaluations measured drift, the largest %.3f; want at least 3, all under %g", measured, worst, stat.W1Threshold)
			}
		})
	}
}

// TestClassicTenantCompletions: answers of a classic version count for the
// tenant that sent them, as LLM completions do.
func TestClassicTenantCompletions(t *testing.T) {
	t.Parallel()
	s, err := Parse([]byte(`name: tenants-classic
seed: 1
duration: 30s
warmup: 5s
arrivals: {process: poisson, rate: 100}
tenants:
  - {name: a, share: 0.5}
  - {name: b, share: 0.5}
versions:
  - name: v23
    gpus: 1
    weight: 100
    profile: {latency_ms: {p50: 8, p99: 21}, error_rate: 0.01, score: {mean: 0.12, sd: 0.18}}
`))
	if err != nil {
		t.Fatal(err)
	}
	rep := run(t, s)
	completed := 0
	for _, tr := range rep.Tenants {
		if tr.Completed == 0 || tr.Completed > tr.Requests {
			t.Errorf("tenant %s: %d completed of %d requests, want most of them", tr.Name, tr.Completed, tr.Requests)
		}
		completed += tr.Completed
	}
	if len(rep.Versions) != 1 || completed != rep.Versions[0].Completed {
		t.Errorf("tenants completed %d, version completed %+v; want equal", completed, rep.Versions)
	}
}
