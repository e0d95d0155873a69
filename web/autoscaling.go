package web

// AutoscalingProps is the endpoint page's autoscaling section: the policy,
// the count the autoscaler set, the replica count over time and every
// decision that changed it.
type AutoscalingProps struct {
	Endpoint string
	// Policy is the policy in a few lines ("rps 100 per replica", ...);
	// Default says it is the task's defaults.
	Policy  []string
	Default bool
	// Desired is the autoscaler's count ("" before its first decision).
	Desired  string
	CanWrite bool
	Form     AutoscalingForm
	Errors   FieldErrors
	Saved    bool
	// Chart is the replica count over time as SVG polyline points in a
	// 600 × 120 box, ChartMax the count at the top; empty without
	// decisions.
	Chart    string
	ChartMax int
	// Decisions are newest first.
	Decisions []DecisionRow
}

// AutoscalingForm is the policy form's fields as typed.
type AutoscalingForm struct {
	// Signals is "signal=target, ..." (rps=100, queue_depth=10).
	Signals, MinReplicas, MaxReplicas, ScaleDownS, GraceS string
}

// DecisionRow is one stored decision on the timeline.
type DecisionRow struct {
	At, Change, Signal, Reason string
}
