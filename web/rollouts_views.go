package web

// RolloutRow is one rollout in a list.
type RolloutRow struct {
	ID                                  int64
	Endpoint, From, To, Strategy, State string
	Paused                              bool
	Percent                             int // the current step's percent
	Initiator, Created                  string
}

// RolloutsSection is the endpoint page's rollouts: recent ones and, for
// those who may, the form that starts one.
type RolloutsSection struct {
	Endpoint string
	CSRF     string
	CanStart bool
	Versions []string
	// Unroutable are the versions that cannot be rolled out now, with why
	// (invalid, still being validated): offered disabled, with the reason.
	Unroutable map[string]string
	Rows       []RolloutRow
	Form       RolloutForm
	Errors     FieldErrors
}

// RolloutForm is the start-rollout form's values, as typed.
type RolloutForm struct {
	Version, Strategy, Steps, BakeMinutes, IntervalSeconds string
	// Worse are the reasons the candidate's offline metrics are worse than
	// a serving version's, when a start was refused for them: the form asks
	// for confirmation (AcceptWorse) and shows them.
	Worse       []string
	AcceptWorse bool
}

// RolloutStep is one step of the progress bar.
type RolloutStep struct {
	Percent int
	Bake    string
	// Status is done, current, waiting or approval (the step that waits for
	// a person).
	Status string
}

// RolloutEvent is one line of the timeline.
type RolloutEvent struct {
	At, Kind, Decision, State, Message, Actor string
}

// RolloutSide is one version's numbers in the latest evaluated window.
type RolloutSide struct {
	Version                   string
	Requests, Errors, Streams uint64
	P99MS, P99TPOTMS          string
}

// RolloutDrift is the candidate's output drift from the incumbent over
// the latest evaluated window: the drift check's numbers, and for a shadow
// its output agreement.
type RolloutDrift struct {
	Metric, Value, Threshold string
	CandidateSamples         uint64
	IncumbentSamples         uint64
	// Status is agrees, drifting or not_enough_data.
	Status string
}

// RolloutApproval is a person's decision.
type RolloutApproval struct {
	Approver, Decision, Comment, At string
}

// RolloutProps fills the rollout page and its live section.
type RolloutProps struct {
	Layout
	ID                                        int64
	Endpoint, Team, From, To, Strategy, State string
	Reason, Initiator, Created                string
	Paused, Active                            bool
	Steps                                     []RolloutStep
	// Window is the latest evaluation's numbers (candidate, incumbent);
	// empty before the first.
	Window     []RolloutSide
	WindowSpan string
	// Drift is the latest window's output drift; nil when not measured.
	Drift *RolloutDrift
	// DriftURL is the endpoint's drift dashboard.
	DriftURL string
	// HasDriftCheck is set when a verdict charted holds the drift check.
	HasDriftCheck bool
	// Checks is one chart per judged metric: the candidate's value and the
	// threshold it was held to at every evaluation, oldest first.
	Checks    []Chart
	Events    []RolloutEvent
	Approvals []RolloutApproval
	// What the viewer may press.
	CanApprove, CanOperate, CanCanary bool
	// WaitingFor says who may approve, when the rollout waits.
	WaitingFor string
	Error      string
	// Cost is what the canary has cost and what promoting it changes per
	// month; nil when chargeback is not configured.
	Cost *RolloutCost
}

// RolloutCost is a rollout's cost: the candidate (To) and incumbent (From)
// since the rollout started, dollar figures without the "$".
type RolloutCost struct {
	From, To       string
	Window         string // "since 2026-10-07 10:00 UTC" or "2026-10-07 10:00 – 11:30 UTC"
	SoFar          string
	IncumbentSoFar string
	// CandidatePerHour and IncumbentPerHour are per hour, to 4 places;
	// MonthlyChange is signed, with its "$" ("+$1,234.56", "−$12.00").
	CandidatePerHour, IncumbentPerHour, MonthlyChange string
	Versions                                          []RolloutCostVersion
}

// RolloutCostVersion is one version's metered time and cost in the window.
type RolloutCostVersion struct {
	Version, GPUHours, CPUCoreHours, Cost, PerHour string
}
