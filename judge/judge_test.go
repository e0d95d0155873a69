package judge_test

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"modelplane/busapi"
	"modelplane/field"
	"modelplane/judge"
)

// hist puts counts[i] observations at ms[i] milliseconds.
func hist(pairs ...float64) []uint64 {
	h := make([]uint64, busapi.LatencyBuckets)
	for i := 0; i+1 < len(pairs); i += 2 {
		h[busapi.LatencyBucket(time.Duration(pairs[i+1]*float64(time.Millisecond)))] += uint64(pairs[i])
	}
	return h
}

// win is a plain window: n requests, errs of them failed, 99 percent at
// fastMS and 1 percent at p99MS and above.
func win(n, errs uint64, fastMS, slowMS float64) judge.Window {
	slow := float64(n) / 50
	return judge.Window{Requests: n, Errors: errs, Latency: hist(float64(n)-slow, fastMS, slow, slowMS)}
}

// llm is a streamed window whose TPOT has the given p99 region.
func llm(n uint64, tpotMS float64) judge.Window {
	slow := float64(n) / 50
	return judge.Window{Requests: n, Streams: n, Latency: hist(float64(n), 2000),
		TPOT: hist(float64(n)-slow, tpotMS*0.6, slow, tpotMS)}
}

func TestEvaluate(t *testing.T) {
	t.Parallel()
	base := judge.Criteria{MaxP99MS: 100, MaxRegression: 0.2, MaxErrorRateDelta: 0.5, MinRequests: 100}
	drifting := func(c judge.Criteria) judge.Criteria { c.Drift = true; return c }
	tests := []struct {
		name      string
		c         judge.Criteria
		in        judge.Input
		want      judge.Decision
		wantCheck string // the check named in the reason
	}{
		{"healthy and baked advances", base,
			judge.Input{Candidate: win(1000, 1, 10, 40), Incumbent: win(50000, 50, 10, 40), Baked: true}, judge.Advance, "every check"},
		{"healthy still baking holds", base,
			judge.Input{Candidate: win(1000, 1, 10, 40), Incumbent: win(50000, 50, 10, 40)}, judge.Hold, "baking"},
		{"too few candidate requests holds even when slow", base,
			judge.Input{Candidate: win(99, 0, 10, 900), Incumbent: win(50000, 0, 10, 40), Baked: true}, judge.Hold, "requests"},
		{"no incumbent traffic holds", base,
			judge.Input{Candidate: win(1000, 0, 10, 40), Incumbent: judge.Window{}, Baked: true}, judge.Hold, "requests"},
		{"no incumbent traffic still rolls back past the SLA", base,
			judge.Input{Candidate: win(1000, 0, 10, 150), Incumbent: judge.Window{}, Baked: true}, judge.Rollback, "p99_latency_ms"},
		{"error rate 0.6 points over rolls back", base,
			judge.Input{Candidate: win(1000, 7, 10, 40), Incumbent: win(10000, 10, 10, 40), Baked: true}, judge.Rollback, "error_rate_delta_pct"},
		{"error rate 0.4 points over passes", base,
			judge.Input{Candidate: win(1000, 5, 10, 40), Incumbent: win(10000, 10, 10, 40), Baked: true}, judge.Advance, "every check"},
		{"p99 30 percent slower rolls back under the SLA", base,
			judge.Input{Candidate: win(1000, 0, 10, 52), Incumbent: win(10000, 0, 10, 40), Baked: true}, judge.Rollback, "p99_latency_ms_regression"},
		{"p99 10 percent slower passes", base,
			judge.Input{Candidate: win(1000, 0, 10, 44), Incumbent: win(10000, 0, 10, 40), Baked: true}, judge.Advance, "every check"},
		{"rollback does not wait for the bake", base,
			judge.Input{Candidate: win(1000, 0, 10, 150), Incumbent: win(10000, 0, 10, 40)}, judge.Rollback, "p99_latency_ms"},
		{"seed canary: TPOT 41 ms against an SLA of 30 rolls back",
			judge.DefaultCriteria("llm", 0, 30),
			judge.Input{Candidate: llm(200, 41), Incumbent: llm(20000, 22), LLM: true}, judge.Rollback, "p99_tpot_ms"},
		{"LLM judged on TPOT, not on long request latency",
			judge.DefaultCriteria("llm", 0, 30),
			judge.Input{Candidate: llm(200, 22), Incumbent: llm(20000, 22), LLM: true, Baked: true}, judge.Advance, "every check"},
		{"LLM whose clients do not stream is judged on requests and advances", judge.DefaultCriteria("llm", 0, 30),
			judge.Input{Candidate: win(1000, 0, 10, 40), Incumbent: win(1000, 0, 10, 40), LLM: true, Baked: true}, judge.Advance, "every check"},
		{"LLM without streams: errors still roll back", judge.DefaultCriteria("llm", 0, 30),
			judge.Input{Candidate: win(1000, 400, 10, 40), Incumbent: win(1000, 0, 10, 40), LLM: true, Baked: true}, judge.Rollback, "error_rate_delta_pct"},
		{"LLM without streams: request latency regression rolls back", judge.DefaultCriteria("llm", 0, 30),
			judge.Input{Candidate: win(1000, 0, 10, 80), Incumbent: win(1000, 0, 10, 40), LLM: true, Baked: true}, judge.Rollback, "p99_latency_ms_regression"},
		{"LLM without streams: no absolute request latency ceiling", judge.DefaultCriteria("llm", 0, 30),
			judge.Input{Candidate: win(1000, 0, 10, 4000), Incumbent: win(1000, 0, 10, 4000), LLM: true, Baked: true}, judge.Advance, "every check"},
		{"LLM with streams on one side only is judged on request latency", judge.DefaultCriteria("llm", 0, 30),
			judge.Input{Candidate: win(1000, 0, 10, 40), Incumbent: llm(20000, 22), LLM: true, Baked: true}, judge.Advance, "every check"},
		{"LLM with few requests holds", judge.DefaultCriteria("llm", 0, 30),
			judge.Input{Candidate: win(50, 0, 10, 40), Incumbent: win(1000, 0, 10, 40), LLM: true, Baked: true}, judge.Hold, "requests"},
		{"drift gate: not measured holds", drifting(base),
			judge.Input{Candidate: win(1000, 0, 10, 40), Incumbent: win(10000, 0, 10, 40), Baked: true}, judge.Hold, "drift"},
		{"drift gate: too few samples holds", drifting(base),
			judge.Input{Candidate: win(1000, 0, 10, 40), Incumbent: win(10000, 0, 10, 40), Baked: true,
				Drift: &judge.Drift{Metric: "wasserstein_norm", Value: 3, Threshold: 0.3, CandidateSamples: 5}}, judge.Hold, "drift"},
		{"drift gate: past the threshold rolls back a fast, error-free model", drifting(base),
			judge.Input{Candidate: win(1000, 0, 10, 40), Incumbent: win(10000, 0, 10, 40), Baked: true,
				Drift: &judge.Drift{Metric: "wasserstein_norm", Value: 1.3, Threshold: 0.3, Enough: true, CandidateSamples: 500, IncumbentSamples: 9000}},
			judge.Rollback, "drift"},
		{"drift gate: under the threshold advances", drifting(base),
			judge.Input{Candidate: win(1000, 0, 10, 40), Incumbent: win(10000, 0, 10, 40), Baked: true,
				Drift: &judge.Drift{Metric: "wasserstein_norm", Value: 0.02, Threshold: 0.3, Enough: true, CandidateSamples: 500, IncumbentSamples: 9000}},
			judge.Advance, "every check"},
		{"drift waits for the candidate's requests", drifting(base),
			judge.Input{Candidate: win(99, 0, 10, 40), Incumbent: win(10000, 0, 10, 40), Baked: true,
				Drift: &judge.Drift{Metric: "kl", Value: 2, Threshold: 0.1, Enough: true, CandidateSamples: 500, IncumbentSamples: 9000}},
			judge.Hold, "requests"},
		{"a NaN never advances", drifting(base),
			judge.Input{Candidate: win(1000, 0, 10, 40), Incumbent: win(10000, 0, 10, 40), Baked: true,
				Drift: &judge.Drift{Metric: "kl", Value: math.NaN(), Threshold: 0.1, Enough: true}}, judge.Hold, "drift"},
		{"a short histogram is missing data", base,
			judge.Input{Candidate: judge.Window{Requests: 1000, Latency: []uint64{1000}}, Incumbent: win(10000, 0, 10, 40), Baked: true},
			judge.Hold, "p99_latency_ms"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			v := judge.Evaluate(tt.c, tt.in)
			if v.Decision != tt.want || !strings.Contains(v.Reason, tt.wantCheck) {
				t.Fatalf("verdict = %s (%s), want %s naming %q; checks %+v", v.Decision, v.Reason, tt.want, tt.wantCheck, v.Checks)
			}
			if _, err := json.Marshal(v); err != nil {
				t.Fatalf("verdict does not encode: %v", err)
			}
		})
	}
}

func TestEvaluateRecordsTheNumbers(t *testing.T) {
	t.Parallel()
	v := judge.Evaluate(judge.DefaultCriteria("llm", 0, 30), judge.Input{Candidate: llm(200, 41), Incumbent: llm(20000, 22), LLM: true})
	byName := map[string]judge.Check{}
	for _, ch := range v.Checks {
		byName[ch.Name] = ch
	}
	abs := byName["p99_tpot_ms"]
	if abs.Outcome != judge.Fail || abs.Threshold != 30 || abs.Candidate < 37 || abs.Candidate > 42 {
		t.Errorf("p99_tpot_ms check = %+v, want a failure at about 41 ms against 30", abs)
	}
	rel := byName["p99_tpot_ms_regression"]
	if rel.Incumbent == nil || *rel.Incumbent < 20 || *rel.Incumbent > 23 || rel.Threshold != *rel.Incumbent*1.2 {
		t.Errorf("regression check = %+v, want the incumbent's ~22 ms and a threshold 20 percent above it", rel)
	}
}

func TestCriteriaValidate(t *testing.T) {
	t.Parallel()
	var errs field.Errors
	judge.Criteria{MaxP99MS: -1, MaxP99TPOTMS: math.NaN(), MaxRegression: 11, MaxErrorRateDelta: -0.1}.Validate(&errs, "criteria")
	want := []string{"criteria.max_p99_ms", "criteria.max_p99_tpot_ms", "criteria.max_regression", "criteria.max_error_rate_delta", "criteria.min_requests"}
	if len(errs) != len(want) {
		t.Fatalf("errors = %v, want %v", errs, want)
	}
	for i, f := range want {
		if errs[i].Field != f {
			t.Errorf("error %d field = %q, want %q", i, errs[i].Field, f)
		}
	}
	errs = nil
	judge.DefaultCriteria("classification", 50, 0).Validate(&errs, "criteria")
	if len(errs) != 0 {
		t.Errorf("default criteria invalid: %v", errs)
	}
	if !judge.DefaultCriteria("regression", 0, 0).Drift || judge.DefaultCriteria("llm", 0, 0).Drift {
		t.Error("drift gate default: want on for regression, off for llm")
	}
}
