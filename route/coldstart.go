package route

import (
	"encoding/json"
	"slices"

	"modelplane/busapi"
)

// Default cold-start budgets of an endpoint scaled to zero, in seconds
// (busapi.Route.ColdStartBudgetS), when its autoscaling policy sets none: a
// CPU replica starts in seconds, a GPU one loads weights onto the device
// and warms up first.
const (
	DefaultColdStartBudgetCPU = 30
	DefaultColdStartBudgetGPU = 120
)

// policyBudget is the cold-start budget an endpoint's stored autoscaling
// policy (endpoints.autoscale_policy, written by package fleet) sets, in
// whole seconds rounded up; 0 when it sets none.
func policyBudget(policy []byte) int {
	if len(policy) == 0 {
		return 0
	}
	var p struct {
		ColdStartBudgetS float64 `json:"cold_start_budget_s"`
	}
	if json.Unmarshal(policy, &p) != nil || p.ColdStartBudgetS <= 0 {
		return 0
	}
	return int(p.ColdStartBudgetS + 0.999)
}

// ColdStartBudget is the default budget of an endpoint whose versions need
// a GPU (gpu) or not.
func ColdStartBudget(gpu bool) int {
	if gpu {
		return DefaultColdStartBudgetGPU
	}
	return DefaultColdStartBudgetCPU
}

// medianMS is the median of a version's measured cold starts
// (model_versions.cold_starts_ms), 0 when none was measured; of an even
// number, the upper middle one, so that a Retry-After errs on the late side.
func medianMS(ms []int64) int64 {
	if len(ms) == 0 {
		return 0
	}
	s := slices.Clone(ms)
	slices.Sort(s)
	return s[len(s)/2]
}

// setColdStart fills what a gateway needs to hold the requests of an
// endpoint scaled to zero: its budget, the policy's (budget, when above
// 0) or the default by whether any of its versions needs a GPU, and each version's measured cold start (the caller's
// medians, by version name). It does nothing for another endpoint, whose
// entry then does not change when a replica's cold start is measured.
func setColdStart(rt *busapi.Route, budget int, gpu bool, coldMS map[string]int64) {
	if !rt.ScaledToZero {
		return
	}
	rt.ColdStartBudgetS = budget
	if budget <= 0 {
		rt.ColdStartBudgetS = ColdStartBudget(gpu)
	}
	for i := range rt.Versions {
		rt.Versions[i].ColdStartMS = coldMS[rt.Versions[i].Name]
	}
}
