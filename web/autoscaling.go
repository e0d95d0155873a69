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
	// Timeline is the replica count over time, nil before the first
	// decision.
	Timeline *ReplicaTimeline
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

// ReplicaTimeline is the endpoint's replica count over time as step lines
// in a 600 × 130 box: the count the autoscaler wanted and the replicas
// ready when it decided, from its stored decisions up to now.
type ReplicaTimeline struct {
	// Wanted and Ready are SVG polyline points; Max is the count at the
	// top of the scale.
	Wanted, Ready string
	Max           int
	// Ticks are the time axis's labels, dated ("2006-01-02 15:04" UTC),
	// first at the left edge and last at the right.
	Ticks []string
}
