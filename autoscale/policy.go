package autoscale

import (
	"fmt"
	"math"
	"time"

	"modelplane/field"
)

// Target is one signal a policy scales on and the per-replica value it
// aims for.
type Target struct {
	Signal Signal
	Target float64
}

// Predictive is the predictive pre-scaling mode: with advisory or on, the
// caller passes Input.Forecast (see Forecast) and the decision records (or,
// on, applies) the count it asks for.
type Predictive string

// The predictive modes: off; advisory records what it would have done; on
// pre-scales.
const (
	PredictiveOff      Predictive = "off"
	PredictiveAdvisory Predictive = "advisory"
	PredictiveOn       Predictive = "on"
)

// ScaleDownBasis is what a scale-down follows within the scale-down window.
type ScaleDownBasis string

// The scale-down bases. Peak scales down only to the highest
// recommendation of the window: a load that swings faster than a replica
// starts keeps the count of its peaks. Mean scales down to the window's
// mean load plus the tolerance, never within a window of a scale-up: the
// highest of a noisy signal over a window sits above the load it measures
// (a 15 s request rate at 35 req/s moves ±4 % between evaluations) and a
// declining load is followed a window late, where the mean is half a window
// late and noise averages out. For loads that change slowly against the
// cold start (a diurnal day), not for square waves (docs/autoscaling.md).
const (
	ScaleDownPeak ScaleDownBasis = "peak"
	ScaleDownMean ScaleDownBasis = "mean"
)

// Policy is how one endpoint scales. Error field names are the API's
// (snake_case, durations in seconds).
type Policy struct {
	// Signals are the signals scaled on, each at most once; the largest
	// desire of any wins. None keeps the count where it is, within min/max.
	Signals []Target
	// MinReplicas is the floor; 0 lets the endpoint scale to zero after
	// ScaleToZeroGrace without requests. MaxReplicas is the ceiling.
	MinReplicas, MaxReplicas int
	// ScaleUpStabilization is how long a higher desire must last before
	// the count follows it (the lowest desire in the window is taken);
	// ScaleDownStabilization is how far back the highest desire holds a
	// scale-down. It is also how long panic mode lasts after the last
	// panic-level desire.
	ScaleUpStabilization, ScaleDownStabilization time.Duration
	// ScaleDownBasis is what a scale-down follows within the scale-down
	// window: its highest recommendation (peak, the default; "" is peak)
	// or its mean load (mean).
	ScaleDownBasis ScaleDownBasis
	// ScaleUpRate caps one decision at ceil(current × rate) (≥ 1);
	// ScaleDownRate floors it at ceil(current × rate) (in (0, 1]), so a
	// decision never removes more than that share.
	ScaleUpRate, ScaleDownRate float64
	// Tolerance is the band around the target, as a share (0.1 is ±10 %),
	// inside which nothing changes.
	Tolerance float64
	// PanicThreshold is the desire, as a multiple of the current count, at
	// which panic mode starts (2: twice the replicas there are).
	PanicThreshold float64
	// ScaleToZeroGrace is how long an endpoint with MinReplicas 0 stays up
	// without requests before it goes to zero.
	ScaleToZeroGrace time.Duration
	// ColdStartBudget is how long a request to an endpoint at zero may be
	// held while a replica starts (the gateway's hold; not used by the
	// decision yet).
	ColdStartBudget time.Duration
	// Predictive is the predictive mode; on raises the count to the
	// forecast's, advisory only records it in the reason.
	Predictive Predictive
	// TrendHorizon, above 0, follows the trend of each rate signal (rps,
	// tokens_per_s, prompt_tokens_per_s) fitted over the last TrendWindow:
	// a rising load is projected this far ahead (about the version's cold
	// start) and the signal's desire follows the projection, at most the
	// tolerance above the load; with ScaleDownBasis mean a falling load is
	// followed by the line's level rather than the window's mean. 0 (the
	// default) is off.
	TrendHorizon time.Duration
}

// The seed's defaults (seed 001 section 7).
const (
	DefaultMaxReplicas            = 100
	DefaultScaleUpStabilization   = 0
	DefaultScaleDownStabilization = 300 * time.Second
	DefaultScaleUpRate            = 4.0
	DefaultScaleDownRate          = 0.5
	DefaultTolerance              = 0.1
	DefaultPanicThreshold         = 2.0
	DefaultScaleToZeroGrace       = 900 * time.Second
	DefaultColdStartBudgetCPU     = 30 * time.Second
	DefaultColdStartBudgetGPU     = 120 * time.Second
)

// DefaultSignals are the signals and targets a task scales on unless its
// policy says otherwise: classic models on requests/s (the seed's 5,000 per
// XGBoost replica) and queue depth; LLMs on in-flight streams (200), KV-cache
// use (0.85), queue depth and tokens/s (2,000). The seed's queue target is 0
// ("scale when a queue builds"), which the ratio cannot use: a mean queue
// of 10 requests per classic replica (a few dynamic batches) and 4 per LLM
// replica stand for it.
func DefaultSignals(task Task) []Target {
	if task == TaskLLM {
		return []Target{{InFlight, 200}, {KVCache, 0.85}, {QueueDepth, 4}, {TokensPerSecond, 2000}}
	}
	return []Target{{RPS, 5000}, {QueueDepth, 10}}
}

// DefaultPolicy is the seed's policy for an endpoint of task, on GPUs or
// not, between minReplicas and the default maximum.
func DefaultPolicy(task Task, gpu bool, minReplicas int) Policy {
	budget := DefaultColdStartBudgetCPU
	if gpu {
		budget = DefaultColdStartBudgetGPU
	}
	return Policy{
		Signals:                DefaultSignals(task),
		MinReplicas:            minReplicas,
		MaxReplicas:            max(DefaultMaxReplicas, minReplicas),
		ScaleUpStabilization:   DefaultScaleUpStabilization,
		ScaleDownStabilization: DefaultScaleDownStabilization,
		ScaleDownBasis:         ScaleDownPeak,
		ScaleUpRate:            DefaultScaleUpRate,
		ScaleDownRate:          DefaultScaleDownRate,
		Tolerance:              DefaultTolerance,
		PanicThreshold:         DefaultPanicThreshold,
		ScaleToZeroGrace:       DefaultScaleToZeroGrace,
		ColdStartBudget:        budget,
		Predictive:             PredictiveOff,
	}
}

// Validate checks p for an endpoint of task, on GPUs or not, and returns
// field.Errors naming every bad field.
func (p Policy) Validate(task Task, gpu bool) error {
	var errs field.Errors
	seen := map[Signal]bool{}
	for i, t := range p.Signals {
		field := fmt.Sprintf("signals[%d]", i)
		if err := task.reports(t.Signal, gpu); err != nil {
			errs.Add(field+".signal", "%v", err)
		} else if seen[t.Signal] {
			errs.Add(field+".signal", "%s is listed twice", t.Signal)
		}
		seen[t.Signal] = true
		switch {
		case !(t.Target > 0) || math.IsInf(t.Target, 0):
			errs.Add(field+".target", "must be a positive number, got %v", t.Target)
		case t.Signal.fraction() && t.Target > 1:
			errs.Add(field+".target", "%s is a share from 0 to 1, got %v", t.Signal, t.Target)
		}
	}
	if p.MinReplicas < 0 {
		errs.Add("min_replicas", "must be 0 or more, got %d", p.MinReplicas)
	}
	if p.MaxReplicas < 1 {
		errs.Add("max_replicas", "must be at least 1, got %d", p.MaxReplicas)
	} else if p.MinReplicas > p.MaxReplicas {
		errs.Add("min_replicas", "must not exceed max_replicas (%d), got %d", p.MaxReplicas, p.MinReplicas)
	}
	if p.ScaleUpStabilization < 0 {
		errs.Add("scale_up_stabilization_s", "must be 0 or more, got %v", p.ScaleUpStabilization.Seconds())
	}
	if p.ScaleDownStabilization < 0 {
		errs.Add("scale_down_stabilization_s", "must be 0 or more, got %v", p.ScaleDownStabilization.Seconds())
	}
	switch p.ScaleDownBasis {
	case "", ScaleDownPeak, ScaleDownMean:
	default:
		errs.Add("scale_down_basis", "must be one of peak, mean, got %q", p.ScaleDownBasis)
	}
	if !(p.ScaleUpRate >= 1) || math.IsInf(p.ScaleUpRate, 0) {
		errs.Add("scale_up_rate", "must be at least 1 (a multiple of the current replicas), got %v", p.ScaleUpRate)
	}
	if !(p.ScaleDownRate > 0 && p.ScaleDownRate <= 1) {
		errs.Add("scale_down_rate", "must be above 0 and at most 1 (a share of the current replicas), got %v", p.ScaleDownRate)
	}
	if !(p.Tolerance >= 0 && p.Tolerance < 1) {
		errs.Add("tolerance", "must be from 0 to below 1, got %v", p.Tolerance)
	}
	if !(p.PanicThreshold > 1) || math.IsInf(p.PanicThreshold, 0) {
		errs.Add("panic_threshold", "must be above 1, got %v", p.PanicThreshold)
	}
	if p.ScaleToZeroGrace < 0 {
		errs.Add("scale_to_zero_grace_s", "must be 0 or more, got %v", p.ScaleToZeroGrace.Seconds())
	}
	if p.ColdStartBudget <= 0 {
		errs.Add("cold_start_budget_s", "must be positive, got %v", p.ColdStartBudget.Seconds())
	}
	if p.TrendHorizon < 0 || p.TrendHorizon > MaxTrendHorizon {
		errs.Add("trend_horizon_s", "must be from 0 (off) to %v, got %v", MaxTrendHorizon.Seconds(), p.TrendHorizon.Seconds())
	}
	switch p.Predictive {
	case PredictiveOff, PredictiveAdvisory, PredictiveOn:
	default:
		errs.Add("predictive", "must be one of off, advisory, on, got %q", p.Predictive)
	}
	return errs.Err()
}
