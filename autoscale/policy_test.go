package autoscale

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"modelplane/field"
)

// fields returns the fields a field.Errors in err's chain names, sorted.
func fields(err error) []string {
	var ve field.Errors
	if !errors.As(err, &ve) {
		return nil
	}
	var out []string
	for _, f := range ve {
		out = append(out, f.Field)
	}
	slices.Sort(out)
	return out
}

func TestDefaultPoliciesFollowTheSeed(t *testing.T) {
	t.Parallel()
	classic := DefaultPolicy(TaskClassification, false, 1)
	if got, want := classic.Signals, []Target{{RPS, 5000}, {QueueDepth, 10}}; !slices.Equal(got, want) {
		t.Errorf("classic signals = %v, want %v", got, want)
	}
	llm := DefaultPolicy(TaskLLM, true, 2)
	if got, want := llm.Signals, []Target{{InFlight, 200}, {KVCache, 0.85}, {QueueDepth, 4}, {TokensPerSecond, 2000}}; !slices.Equal(got, want) {
		t.Errorf("llm signals = %v, want %v", got, want)
	}
	if llm.ScaleUpStabilization != 0 || llm.ScaleDownStabilization != 300*time.Second {
		t.Errorf("stabilisation = %v up, %v down, want 0s and 5m0s", llm.ScaleUpStabilization, llm.ScaleDownStabilization)
	}
	if llm.ScaleUpRate != 4 || llm.ScaleDownRate != 0.5 || llm.Tolerance != 0.1 {
		t.Errorf("rates = %v up, %v down, tolerance %v; want 4, 0.5, 0.1", llm.ScaleUpRate, llm.ScaleDownRate, llm.Tolerance)
	}
	if llm.ScaleToZeroGrace != 900*time.Second || llm.Predictive != PredictiveOff {
		t.Errorf("grace %v, predictive %q; want 15m0s and off", llm.ScaleToZeroGrace, llm.Predictive)
	}
	if classic.ColdStartBudget != 30*time.Second || llm.ColdStartBudget != 120*time.Second {
		t.Errorf("cold-start budgets = %v CPU, %v GPU, want 30s and 2m0s", classic.ColdStartBudget, llm.ColdStartBudget)
	}
	if llm.MinReplicas != 2 || llm.MaxReplicas != DefaultMaxReplicas {
		t.Errorf("min/max = %d/%d, want 2/%d", llm.MinReplicas, llm.MaxReplicas, DefaultMaxReplicas)
	}
	for _, tc := range []struct {
		task Task
		gpu  bool
	}{{TaskClassification, false}, {TaskRegression, true}, {TaskLLM, true}, {TaskLLM, false}} {
		if err := DefaultPolicy(tc.task, tc.gpu, 0).Validate(tc.task, tc.gpu); err != nil {
			t.Errorf("default policy of %s (gpu %v) is invalid: %v", tc.task, tc.gpu, err)
		}
	}
}

func TestValidateNamesTheBadField(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		task   Task
		gpu    bool
		change func(*Policy)
		want   []string
	}{
		{"a zero target", TaskClassification, false, func(p *Policy) { p.Signals[0].Target = 0 }, []string{"signals[0].target"}},
		{"a negative target", TaskClassification, false, func(p *Policy) { p.Signals[1].Target = -1 }, []string{"signals[1].target"}},
		{"a share above 1", TaskLLM, true, func(p *Policy) { p.Signals[1].Target = 85 }, []string{"signals[1].target"}},
		{"min above max", TaskClassification, false, func(p *Policy) { p.MinReplicas, p.MaxReplicas = 5, 4 }, []string{"min_replicas"}},
		{"a negative min", TaskClassification, false, func(p *Policy) { p.MinReplicas = -1 }, []string{"min_replicas"}},
		{"a zero max", TaskClassification, false, func(p *Policy) { p.MinReplicas, p.MaxReplicas = 0, 0 }, []string{"max_replicas"}},
		{"an up cap below 1", TaskClassification, false, func(p *Policy) { p.ScaleUpRate = 0.9 }, []string{"scale_up_rate"}},
		{"a down cap above 1", TaskClassification, false, func(p *Policy) { p.ScaleDownRate = 1.5 }, []string{"scale_down_rate"}},
		{"a down cap of 0", TaskClassification, false, func(p *Policy) { p.ScaleDownRate = 0 }, []string{"scale_down_rate"}},
		{"an unknown signal", TaskClassification, false, func(p *Policy) { p.Signals[0].Signal = "p99_latency" }, []string{"signals[0].signal"}},
		{"KV use on a classifier", TaskClassification, true, func(p *Policy) { p.Signals = append(p.Signals, Target{KVCache, 0.8}) }, []string{"signals[2].signal"}},
		{"tokens/s on a regressor", TaskRegression, true, func(p *Policy) { p.Signals = append(p.Signals, Target{TokensPerSecond, 100}) }, []string{"signals[2].signal"}},
		{"GPU use on a CPU endpoint", TaskClassification, false, func(p *Policy) { p.Signals = append(p.Signals, Target{GPUUtil, 0.7}) }, []string{"signals[2].signal"}},
		{"a signal twice", TaskClassification, false, func(p *Policy) { p.Signals = append(p.Signals, Target{RPS, 10}) }, []string{"signals[2].signal"}},
		{"a tolerance of 1", TaskClassification, false, func(p *Policy) { p.Tolerance = 1 }, []string{"tolerance"}},
		{"a negative window", TaskClassification, false, func(p *Policy) { p.ScaleDownStabilization = -time.Second }, []string{"scale_down_stabilization_s"}},
		{"a panic threshold of 1", TaskClassification, false, func(p *Policy) { p.PanicThreshold = 1 }, []string{"panic_threshold"}},
		{"no cold-start budget", TaskClassification, false, func(p *Policy) { p.ColdStartBudget = 0 }, []string{"cold_start_budget_s"}},
		{"an unknown predictive mode", TaskClassification, false, func(p *Policy) { p.Predictive = "maybe" }, []string{"predictive"}},
		{"an unknown scale-down basis", TaskClassification, false, func(p *Policy) { p.ScaleDownBasis = "median" }, []string{"scale_down_basis"}},
		{"a scale-down to the mean is fine", TaskLLM, true, func(p *Policy) { p.ScaleDownBasis = ScaleDownMean }, nil},
		{"a negative trend horizon", TaskLLM, true, func(p *Policy) { p.TrendHorizon = -time.Second }, []string{"trend_horizon_s"}},
		{"a trend horizon past ten minutes", TaskLLM, true, func(p *Policy) { p.TrendHorizon = 11 * time.Minute }, []string{"trend_horizon_s"}},
		{"a trend horizon of a cold start is fine", TaskLLM, true, func(p *Policy) { p.TrendHorizon = 55 * time.Second }, nil},
		{"every bad field at once", TaskClassification, false, func(p *Policy) {
			p.Signals[0].Target, p.MinReplicas, p.MaxReplicas, p.ScaleUpRate = 0, 3, 2, 0.5
		}, []string{"min_replicas", "scale_up_rate", "signals[0].target"}},
		{"GPU use on a GPU classifier is fine", TaskClassification, true, func(p *Policy) { p.Signals = append(p.Signals, Target{GPUUtil, 0.7}) }, nil},
		{"no signals is fine", TaskLLM, true, func(p *Policy) { p.Signals = nil }, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := DefaultPolicy(tt.task, tt.gpu, 1)
			tt.change(&p)
			err := p.Validate(tt.task, tt.gpu)
			if got := fields(err); !slices.Equal(got, tt.want) {
				t.Errorf("Validate fields = %v, want %v (err: %v)", got, tt.want, err)
			}
		})
	}
}

func TestADocWithoutAScaleDownBasisScalesDownByThePeak(t *testing.T) {
	t.Parallel()
	doc := DocOf(DefaultPolicy(TaskLLM, true, 1))
	if doc.ScaleDownBasis != "peak" {
		t.Errorf("the default policy's doc says scale_down_basis %q, want peak", doc.ScaleDownBasis)
	}
	doc.ScaleDownBasis = "" // a stored row from before the field
	if got := doc.Policy().ScaleDownBasis; got != ScaleDownPeak {
		t.Errorf("scale_down_basis left out reads %q, want peak", got)
	}
	mean := DefaultPolicy(TaskLLM, true, 1)
	mean.ScaleDownBasis = ScaleDownMean
	if got := StoredPolicy(StoreJSON(mean), "llm", true, 1, 100, time.Minute).ScaleDownBasis; got != ScaleDownMean {
		t.Errorf("a stored mean policy reads back %q", got)
	}
}

func TestATrendHorizonIsOptionalAndStored(t *testing.T) {
	t.Parallel()
	def := DefaultPolicy(TaskLLM, true, 1)
	if def.TrendHorizon != 0 {
		t.Errorf("the default policy's trend horizon is %v, want 0 (off)", def.TrendHorizon)
	}
	if b := StoreJSON(def); strings.Contains(string(b), "trend_horizon_s") {
		t.Errorf("a policy without a trend stores %s, want no trend_horizon_s", b)
	}
	trend := def
	trend.TrendHorizon = 55 * time.Second
	if got := StoredPolicy(StoreJSON(trend), "llm", true, 1, 100, time.Minute).TrendHorizon; got != 55*time.Second {
		t.Errorf("a stored trend horizon of 55s reads back %v", got)
	}
	if got := StoredPolicy([]byte(`{"predictive":"off"}`), "llm", true, 1, 100, time.Minute).TrendHorizon; got != 0 {
		t.Errorf("a stored policy from before the field reads trend horizon %v, want 0", got)
	}
}
