package autoscale

import (
	"encoding/json"
	"math"
	"time"
)

// TargetDoc is one signal of an autoscaling policy as the API and the
// database write it.
type TargetDoc struct {
	Signal string  `json:"signal" enum:"rps,in_flight,queue_depth,batch_queue_ms,gpu_util,kv_cache,tokens_per_s,prompt_tokens_per_s" doc:"The per-replica metric scaled on: prompt_tokens_per_s is the prompt tokens a replica takes in per second, the prefill work asked of it (LLMs)."`
	Target float64 `json:"target" doc:"The per-replica value aimed for; gpu_util and kv_cache are shares from 0 to 1."`
}

// PolicyDoc is an endpoint's autoscaling policy as the API shows it
// and endpoints.autoscale_policy stores it (without the bounds, which are
// the endpoint's min_replicas and max_replicas columns). Durations are in
// seconds. It is Policy in JSON; PolicyDoc.Policy and DocOf convert.
type PolicyDoc struct {
	Signals                 []TargetDoc `json:"signals" doc:"Signals scaled on, each at most once; the largest desire wins. Empty: the count stays where it is, within the bounds."`
	MinReplicas             int32       `json:"min_replicas" doc:"The endpoint's min_replicas: 0 lets it scale to zero."`
	MaxReplicas             int32       `json:"max_replicas" doc:"The endpoint's max_replicas."`
	ScaleUpStabilizationS   float64     `json:"scale_up_stabilization_s"`
	ScaleDownStabilizationS float64     `json:"scale_down_stabilization_s"`
	ScaleDownBasis          string      `json:"scale_down_basis,omitempty" enum:"peak,mean" doc:"What a scale-down follows within the scale-down window: peak (the default, also when left out) its highest recommendation; mean its mean load plus the tolerance, never within a window of a scale-up, for loads that change slowly against the cold start."`
	ScaleUpRate             float64     `json:"scale_up_rate"`
	ScaleDownRate           float64     `json:"scale_down_rate"`
	Tolerance               float64     `json:"tolerance"`
	PanicThreshold          float64     `json:"panic_threshold"`
	ScaleToZeroGraceS       float64     `json:"scale_to_zero_grace_s"`
	ColdStartBudgetS        float64     `json:"cold_start_budget_s"`
	Predictive              string      `json:"predictive" enum:"off,advisory,on"`
	TrendHorizonS           float64     `json:"trend_horizon_s,omitempty" doc:"Above 0, scale on the trend of the rate signals (rps, tokens_per_s, prompt_tokens_per_s) over the last two minutes: a rising load projected this many seconds ahead (about the cold start) raises the count before it arrives; with scale_down_basis mean a falling load is followed by its trend rather than the window's mean. 0 or left out: off. At most 600."`
}

// seconds turns an API duration into a time.Duration, keeping NaN and
// out-of-range values invalid for Validate (negative) rather than
// wrapping them.
func seconds(s float64) time.Duration {
	if math.IsNaN(s) || s < 0 {
		return -1
	}
	if s > 10*365*24*3600 {
		s = 10 * 365 * 24 * 3600
	}
	return time.Duration(s * float64(time.Second))
}

// Policy is p as the autoscale package takes it.
func (p PolicyDoc) Policy() Policy {
	out := Policy{MinReplicas: int(p.MinReplicas), MaxReplicas: int(p.MaxReplicas),
		ScaleUpStabilization: seconds(p.ScaleUpStabilizationS), ScaleDownStabilization: seconds(p.ScaleDownStabilizationS),
		ScaleDownBasis: ScaleDownBasis(p.ScaleDownBasis),
		ScaleUpRate:    p.ScaleUpRate, ScaleDownRate: p.ScaleDownRate, Tolerance: p.Tolerance, PanicThreshold: p.PanicThreshold,
		ScaleToZeroGrace: seconds(p.ScaleToZeroGraceS), ColdStartBudget: seconds(p.ColdStartBudgetS),
		Predictive: Predictive(p.Predictive), TrendHorizon: seconds(p.TrendHorizonS), Signals: make([]Target, len(p.Signals))}
	if out.ScaleDownBasis == "" {
		out.ScaleDownBasis = ScaleDownPeak // left out: the default
	}
	for i, t := range p.Signals {
		out.Signals[i] = Target{Signal: Signal(t.Signal), Target: t.Target}
	}
	return out
}

// DocOf is p as the API shows it.
func DocOf(p Policy) PolicyDoc {
	out := PolicyDoc{MinReplicas: int32(p.MinReplicas), MaxReplicas: int32(p.MaxReplicas),
		ScaleUpStabilizationS: p.ScaleUpStabilization.Seconds(), ScaleDownStabilizationS: p.ScaleDownStabilization.Seconds(),
		ScaleDownBasis: string(p.ScaleDownBasis),
		ScaleUpRate:    p.ScaleUpRate, ScaleDownRate: p.ScaleDownRate, Tolerance: p.Tolerance, PanicThreshold: p.PanicThreshold,
		ScaleToZeroGraceS: p.ScaleToZeroGrace.Seconds(), ColdStartBudgetS: p.ColdStartBudget.Seconds(),
		Predictive: string(p.Predictive), TrendHorizonS: p.TrendHorizon.Seconds(), Signals: make([]TargetDoc, len(p.Signals))}
	for i, t := range p.Signals {
		out.Signals[i] = TargetDoc{Signal: string(t.Signal), Target: t.Target}
	}
	return out
}

// EndpointPolicy is the seed's policy of an endpoint of task (on GPUs or
// not) between its bounds, scaling to zero after grace (the fleet's wake
// grace, so the two agree).
func EndpointPolicy(task string, gpu bool, minReplicas, maxReplicas int32, grace time.Duration) Policy {
	p := DefaultPolicy(Task(task), gpu, int(minReplicas))
	p.MaxReplicas = int(maxReplicas)
	p.ScaleToZeroGrace = grace
	return p
}

// StoredPolicy reads endpoints.autoscale_policy: NULL (or a value that does
// not decode) is EndpointPolicy; the bounds are always the endpoint's.
func StoredPolicy(raw []byte, task string, gpu bool, minReplicas, maxReplicas int32, grace time.Duration) Policy {
	def := EndpointPolicy(task, gpu, minReplicas, maxReplicas, grace)
	if len(raw) == 0 {
		return def
	}
	doc := DocOf(def)
	if err := json.Unmarshal(raw, &doc); err != nil {
		return def
	}
	doc.MinReplicas, doc.MaxReplicas = minReplicas, maxReplicas
	return doc.Policy()
}

// StoreJSON is p as endpoints.autoscale_policy stores it.
func StoreJSON(p Policy) []byte {
	doc := DocOf(p)
	b, _ := json.Marshal(struct {
		PolicyDoc
		MinReplicas any `json:"min_replicas,omitempty"`
		MaxReplicas any `json:"max_replicas,omitempty"`
	}{PolicyDoc: doc})
	return b
}
