package web

// Layout is what every page's frame shows.
type Layout struct {
	Title      string
	Active     string // nav section: endpoints, models, team, audit, fleet
	User       string
	Role       string // platform role, if any
	Teams      []string
	ActiveTeam string
	CSRF       string
	Flash      string
	ShowAudit  bool // team admins and platform admins
	ShowFleet  bool // platform admins
}

// FieldErrors maps a form field to its message.
type FieldErrors map[string]string

// DevUser is a demo identity offered on the sign-in page.
type DevUser struct {
	Email       string
	Description string
}

// LoginProps fills the sign-in page.
type LoginProps struct {
	DevUsers []DevUser
	Error    string
	ReturnTo string
}

// EndpointRow is one endpoint in the list.
type EndpointRow struct {
	Name, Team, Model, Status, Tier, Profile, Traffic string
	MinReplicas, MaxReplicas                          int32
}

// EndpointsProps fills the endpoints list.
type EndpointsProps struct {
	Layout
	Rows       []EndpointRow
	NextCursor string
	CanCreate  bool
	// Awaiting are the rollouts waiting for this user's approval.
	Awaiting []RolloutRow
	// NoTeam says the user is in no team (finance): the list is empty
	// because nothing is theirs, not because nothing exists.
	NoTeam bool
}

// EndpointForm is the create-endpoint form's values, as typed.
type EndpointForm struct {
	Name, Model, Version, Profile, Tier, MinReplicas, MaxReplicas, SamplingRate, RetentionDays string
	// RateLimitRPS, RateLimitBurst and TimeoutMS are the gateway settings;
	// blank means 0, the gateway's default.
	RateLimitRPS, RateLimitBurst, TimeoutMS string
	// Batching is the built-in runtime's dynamic batcher; a blank field
	// takes its default.
	Batching BatchingForm
}

// BatchingForm is the dynamic batcher's fields as typed; preferred sizes
// are comma-separated.
type BatchingForm struct {
	MaxBatchSize, MaxQueueDelayUS, PreferredBatchSizes, QueueTimeoutMS string
}

// EndpointNewProps fills the create-endpoint page.
type EndpointNewProps struct {
	Layout
	Form     EndpointForm
	Errors   FieldErrors
	Models   []string
	Profiles []string
	Tiers    []string
}

// TrafficRow is one version's weight on the endpoint page.
type TrafficRow struct {
	Version string
	Weight  int32
	// Shadow is the percentage of requests mirrored to a weight-0 version.
	Shadow float64
}

// EndpointProps fills the endpoint page.
type EndpointProps struct {
	Layout
	Row           EndpointRow
	SamplingRate  string
	RetentionDays int32
	Runtime       string
	Traffic       []TrafficRow
	// Experiment describes the active A/B experiment ("" when none), as
	// "name: v1 50%, v2 50%"; it is set through the API.
	Experiment string
	Versions   []string // all versions of the model, for the traffic form
	// Unroutable are the versions that may not take traffic now, with why.
	Unroutable     map[string]string
	CanWrite       bool
	TrafficErrors  FieldErrors
	TrafficSaved   bool
	Settings       EndpointForm
	SettingsErrors FieldErrors
	Profiles       []string
	Tiers          []string
	Replicas       ReplicasProps
	Stats          StatsProps
	TryIt          TryItProps
	// Advice is the endpoint's right-sizing advice (package chargeback),
	// one sentence each with its numbers.
	Advice      []string
	Rollouts    RolloutsSection
	Autoscaling AutoscalingProps
	// Launch is what the endpoint's replicas run.
	Launch LaunchProps
	// Graph is a graph endpoint's diagrams; nil for a model endpoint.
	Graph *GraphProps
}

// LaunchProps fills the endpoint page's section on what its replicas run:
// one row per replica whose node reported a launch.
type LaunchProps struct {
	Rows []LaunchRow
}

// LaunchRow is one replica's launch: its command line as one shell-quoted
// line, its environment (KEY=value, secrets hidden), and the files
// generated for its runtime under Dir.
type LaunchRow struct {
	Replica, Version, Node string
	Command                string
	Env                    []string
	Dir                    string
	Files                  []LaunchFileRow
	// Truncated says the launch was cut to its bounds.
	Truncated bool
}

// LaunchFileRow is one generated file, or a link when Link is set.
type LaunchFileRow struct {
	Path, Content, Link string
	Truncated           bool
}

// ReplicaRow is one replica on the endpoint page. CrashLog, when set, is
// the log page's query for the crash its reason names (previous=1, and
// the container): a crash-looping pod's current container has no log yet.
type ReplicaRow struct {
	Name, Version, Node, GPUType, Profile, Slots, State, Addr, Reason string
	CrashLog                                                          string
}

// ReplicasProps fills the endpoint page's live replicas section.
type ReplicasProps struct {
	Endpoint       string
	Status         string
	PlacementError string // why replicas could not be placed; "" when they were
	Rows           []ReplicaRow
	LinkNodes      bool // node names link to the fleet pages (platform admins)
}

// ModelRow is one model in the list.
type ModelRow struct {
	Name, Team, Task, Description string
	Versions                      int64
}

// ModelsProps fills the models list.
type ModelsProps struct {
	Layout
	Rows       []ModelRow
	NextCursor string
	CanCreate  bool
}

// ModelForm is the create-model form's values.
type ModelForm struct {
	Team, Name, Task, Description, InputSchema, FeatureNames string
}

// ModelNewProps fills the create-model page.
type ModelNewProps struct {
	Layout
	Form   ModelForm
	Errors FieldErrors
	Teams  []string
}

// VersionRow is one version in a model page.
type VersionRow struct {
	Name, Format, Runtime, Parent, Created, Size string
	// Status is registered, validated or invalid.
	Status string
}

// ServingFeature is one feature of a version's serving metadata.
type ServingFeature struct {
	Name, Categories, Encoding string
}

// ServingView is a version's serving metadata and validation, read-only.
type ServingView struct {
	Features []ServingFeature
	// Output describes the output mapping in words.
	Output string
	// SampleInputs is pretty JSON, empty when none were given.
	SampleInputs string
	// Validation is the validation's state ("" when the control plane
	// does not validate the version), its reason, the answers (pretty
	// JSON) and the latency.
	Validation, Reason, Outputs, Latency string
	// Memory says what a GGUF version needs, computed from its file, and
	// what its replicas are placed with; "" for other versions.
	Memory string
}

// LineageNode places a version in the lineage graph: its dot at X, Y and
// its name at LabelX on the same row.
type LineageNode struct {
	Name         string
	X, Y, LabelX int
}

// LineageLink joins two placed versions.
type LineageLink struct {
	X1, Y1, X2, Y2 int
}

// Lineage is the server-rendered lineage graph.
type Lineage struct {
	Width, Height int
	Nodes         []LineageNode
	Links         []LineageLink
}

// ModelProps fills a model's page.
type ModelProps struct {
	Layout
	Row          ModelRow
	InputSchema  string
	FeatureNames string
	Versions     []VersionRow
	Lineage      Lineage
	CanWrite     bool
}

// VersionNewProps fills the register-version page.
type VersionNewProps struct {
	Layout
	Model    string
	Metadata string
	Manifest string
	Error    string
	Errors   FieldErrors
}

// VersionProps fills a version's page.
type VersionProps struct {
	Layout
	Model    string
	Row      VersionRow
	Metadata string // pretty JSON of the whole version
	Lineage  Lineage
	Serving  ServingView
	// Metrics are the version's offline metrics beside its parent's and
	// the serving versions'; nil when none of them has any.
	Metrics *MetricsTable
	// Answers are the version's validation inputs beside its answers and
	// the parent's and serving versions' answers to the same inputs; nil
	// when its validation answered none.
	Answers *AnswersTable
}

// AnswersTable is validation answers side by side: one row per input of
// the page's version, one column per version (the first the page's own,
// then the columns of the metrics table), and under each other version
// its disagreement rate with the page's.
type AnswersTable struct {
	Columns []MetricsColumn
	Rows    []AnswersRow
	// Rates are, for each column after the first, how many of the inputs
	// both answered got a different label ("1 of 4 inputs (25%)").
	Rates []string
}

// AnswersRow is one input (as "feature=value" pairs) and each version's
// answer to it ("fraud 0.97", "–" when it did not answer it).
type AnswersRow struct {
	Input string
	Cells []AnswerCell
}

// AnswerCell is one version's answer; Differs marks a label other than the
// page's version's.
type AnswerCell struct {
	Text    string
	Differs bool
}

// MetricsTable is offline metrics side by side: one column per version
// (the first the page's own), one row per metric; a version without the
// metric has "–".
type MetricsTable struct {
	Columns []MetricsColumn
	Rows    []MetricsRow
}

// MetricsColumn is one version compared, and why it is ("parent",
// "serving on fraud-scoring").
type MetricsColumn struct {
	Version, Role string
}

// MetricsRow is one metric's values, in the columns' order.
type MetricsRow struct {
	Name   string
	Values []string
}

// MemberRow is one team member.
type MemberRow struct {
	Email, Name, Role string
}

// KeyRow is one API key.
type KeyRow struct {
	ID                                               int64
	Name, Prefix, Team, Role, Created, Expires, Used string
	Revoked                                          bool
}

// TeamProps fills the team page.
type TeamProps struct {
	Layout
	Team       string
	Members    []MemberRow
	Keys       []KeyRow
	IsAdmin    bool
	NewKey     string // shown once, right after creation
	Errors     FieldErrors
	MemberForm MemberRow
	KeyForm    KeyRow
	// Platform admins also see every team and may create teams.
	PlatformAdmin bool
	AllTeams      []string
	TeamForm      string
}

// AuditRow is one audit record.
type AuditRow struct {
	At, Team, Actor, Via, Action, Object, Before, After string
}

// AuditProps fills the audit page.
type AuditProps struct {
	Layout
	Rows       []AuditRow
	Action     string
	ObjectType string
	Actor      string
	NextURL    string
}

// NodeRow is one node in the fleet table, and the summary of a node page.
type NodeRow struct {
	Name, State string
	Lost        bool
	GPUCount    int
	GPUTypes    string
	MIG         string // yes or no
	Slices      string // used / total
	Util        string
	Heartbeat   string // "3 s ago"
	Generation  string // desired / applied
	Behind      bool   // the agent has not applied the desired generation yet
	// CPU is a CPU node's cores and memory in use of its inventory ("4 / 16
	// cores · 6 / 64 GB"); empty on a GPU node.
	CPU string
	// Cache is the node's artifact cache, nil when its agent keeps none.
	Cache *CacheView
	// Runtimes are the runtime catalogue entries the node reports it can
	// run, for people ("builtin, vllm", "every runtime (simulated)", "none",
	// "not reported").
	Runtimes string
}

// CacheView is a node's artifact cache: use of its limit, the versions it
// holds whole, and its hits, misses and evictions since the agent started.
type CacheView struct {
	Used     string // "1.2 GB / 20 GB (6%)", or "1.2 GB (no limit)"
	Versions int
	Hits     uint64
	Misses   uint64
	Evicted  uint64
}

// NodeReplicaRow is one replica on the node page, with its load and its
// cold start split into download, verify, load and warm-up.
type NodeReplicaRow struct {
	Name, Team, Endpoint, Version, State, Reason string
	Failures                                     int32
	QueueDepth, InFlight                         int
	Batch, Requests, TokensPerSecond, TTFT       string
	Download, Verify, Load, Warmup, ColdStart    string
}

// FleetTableProps fills the nodes table and the metered total above it.
type FleetTableProps struct {
	Nodes []NodeRow
	// Metered is the line on GPU time and cost metered today; empty hides it.
	Metered string
}

// FleetProps fills the fleet page.
type FleetProps struct {
	Layout
	Table FleetTableProps
	// Enrollment is the Add node and revoke section (FleetEnrollment).
	Enrollment EnrollmentProps
}

// SliceBox is one GPU slice on a node page; Size is the CSS class that sizes
// its box by profile (g1 to g7; a whole GPU is g7).
type SliceBox struct {
	Profile, Size, Memory                          string
	Used                                           bool
	Team, Endpoint, Version, Replica, ReplicaState string
}

// GPUView is one GPU of a node with its slices.
type GPUView struct {
	Index                            int
	Type, Memory, MIG, Util, MemUsed string
	Slices                           []SliceBox
}

// NodeProps fills a node's page.
type NodeProps struct {
	Layout
	Node     NodeRow
	GPUs     []GPUView
	Replicas []NodeReplicaRow
}

// ErrorProps fills an error page.
type ErrorProps struct {
	Layout
	Status  int
	Message string
}

// StatsProps is the endpoint page's live traffic section.
type StatsProps struct {
	Endpoint string
	Minutes  int
	// Unavailable, when set, is shown instead of charts: there is no
	// statistics store, or reading it failed.
	Unavailable string
	Versions    []VersionStats
	// Explorer is the request explorer, nil when Unavailable is set.
	Explorer *ExplorerProps
}

// VersionStats are one version's charts.
type VersionStats struct {
	Version string
	Charts  []Chart
}

// Chart is one line chart over the section's window; every line has one
// value per step, oldest first, and the chart scales to the largest value.
type Chart struct {
	ID, Title, Unit string
	Lines           []ChartLine
	// From and To are the times of the first and last points (UTC,
	// "15:04" or a date and time), written under the chart as its time
	// axis; empty leaves the axis out.
	From, To string
}

// ChartLine is one series of a chart.
type ChartLine struct {
	Label  string
	Values []float64
}

// TryItProps is the endpoint page's Try it section: a request body to edit,
// the curl command that sends it, and, when the portal may send it itself,
// the gateway's answer.
type TryItProps struct {
	Endpoint string
	// Path is the gateway route Send posts to (predict, or an LLM's
	// chat/completions); the endpoint page's header names it too.
	Path string
	CSRF string
	Body string
	Curl string
	// Configured is false when the portal knows no gateway URL; CanSend when
	// it also holds a key to send with and the caller may write.
	Configured, CanSend bool
	// Status and Response are the gateway's answer to the last Send; Error
	// says why there is none.
	Status   int
	Response string
	Error    string
	// Answers are a 200 predict answer read per instance, with the version
	// that answered; Chat an LLM's request messages and its reply. Either
	// is shown above the raw JSON, which stays one click away.
	Answers      []TryAnswer
	ModelVersion string
	Chat         []ChatTurn
}

// TryAnswer is one instance's prediction: a classifier's label and score,
// or a regressor's value in Score.
type TryAnswer struct {
	Instance     int
	Label, Score string
}

// ChatTurn is one message of a chat.
type ChatTurn struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// WebhookRow is one webhook of a team.
type WebhookRow struct {
	ID         int64
	URL        string
	EventTypes string
	CreatedBy  string
	Created    string
}

// WebhookForm is what the create form holds (again, after it failed).
type WebhookForm struct {
	URL        string
	EventTypes []string
}

// WebhooksProps fills the team's webhooks page. Team admins may add and
// remove webhooks; NewSecret, right after one was added, is shown once.
type WebhooksProps struct {
	Layout
	Team      string
	IsAdmin   bool
	Webhooks  []WebhookRow
	NewSecret string
	NewURL    string
	// EventTypes are the types a webhook may ask for, besides "*".
	EventTypes []string
	Form       WebhookForm
	Errors     FieldErrors
}

// DeliveryRow is one delivery of a webhook's log.
type DeliveryRow struct {
	ID         int64
	EventType  string
	Event      string // what happened, in a few words
	State      string
	Attempts   int
	LastStatus string // the receiver's last HTTP status, "" before any answer
	LastError  string
	Created    string
	Updated    string
	// Redeliverable says a team admin may send it again (dead or
	// delivered).
	Redeliverable bool
}

// WebhookDeliveriesProps fills a webhook's delivery log.
type WebhookDeliveriesProps struct {
	Layout
	Webhook    WebhookRow
	Team       string
	IsAdmin    bool
	Deliveries []DeliveryRow
}

// ExplorerProps is the endpoint page's request explorer: the notable
// requests of the last Minutes and the gateway overhead the seed budgets
// at OverheadBudgetMS at p99.
type ExplorerProps struct {
	Minutes int
	// OverheadP99 is the endpoint's p99 gateway overhead ("1.20 ms"), ""
	// when no request reached a replica; OverBudget says it is above the
	// budget.
	OverheadP99      string
	OverheadRequests uint64
	OverBudget       bool
	OverheadBudgetMS int
	Versions         []OverheadRow
	Slowest          []RequestRow
	Failed           []RequestRow
	Sampled          []RequestRow
}

// Traced says whether any notable request has a trace id.
func (p ExplorerProps) Traced() bool {
	for _, rows := range [][]RequestRow{p.Slowest, p.Failed, p.Sampled} {
		for _, r := range rows {
			if r.TraceID != "" {
				return true
			}
		}
	}
	return false
}

// OverheadRow is one version's gateway overhead.
type OverheadRow struct {
	Version, P50, P99 string
	Requests          uint64
}

// RequestRow is one notable request.
type RequestRow struct {
	At, RequestID, TraceID, Version, Replica, Status string
	Latency, Upstream, Overhead                      string
}
