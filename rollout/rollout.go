package rollout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync/atomic"
	"time"

	"github.com/coder/quartz"
	"github.com/jackc/pgx/v5/pgxpool"

	"modelplane/auth"
	"modelplane/db"
	"modelplane/field"
	"modelplane/judge"
	"modelplane/registry"
)

// Strategies.
const (
	Canary    = "canary"
	BlueGreen = "blue-green"
	Shadow    = "shadow"
)

// States. Starting, Progressing and AwaitingApproval are active: one per
// endpoint at a time.
const (
	StateStarting         = "starting"
	StateProgressing      = "progressing"
	StateAwaitingApproval = "awaiting_approval"
	StatePromoted         = "promoted"
	StateRolledBack       = "rolled_back"
	StateCompleted        = "completed"
)

// Active reports whether a rollout in state s still moves traffic.
func Active(s string) bool {
	return s == StateStarting || s == StateProgressing || s == StateAwaitingApproval
}

// Defaults of a rollout that sets none (DESIGN.md section 8 and issue 6).
var (
	DefaultCanarySteps = []Step{{1, 600}, {5, 600}, {25, 600}, {50, 600}, {100, 600}}
	// DefaultBlueGreenSteps is the switch to 100 percent; its bake is the
	// rollback window.
	DefaultBlueGreenSteps = []Step{{100, 600}}
	// DefaultShadowSteps mirrors 10 percent of the requests.
	DefaultShadowSteps = []Step{{10, 600}}
)

// Default timings.
const (
	DefaultEvaluationInterval = 30 * time.Second
	DefaultEvaluationWindow   = 5 * time.Minute
	DefaultKeep               = time.Hour
)

// Step is one stage of a rollout: the candidate's share of traffic (for a
// shadow: the mirrored share) and how long it bakes before it may advance.
type Step struct {
	Percent     int     `json:"percent"`
	BakeSeconds float64 `json:"bake_seconds" required:"false" doc:"How long the step bakes before it may advance; 0 (the default) advances at the next evaluation."`
}

func (s Step) bake() time.Duration { return time.Duration(s.BakeSeconds * float64(time.Second)) }

// CriteriaSpec overrides some of the default criteria; nil fields keep the
// default.
type CriteriaSpec struct {
	MaxP99MS          *float64 `json:"max_p99_ms,omitempty"`
	MaxP99TPOTMS      *float64 `json:"max_p99_tpot_ms,omitempty"`
	MaxRegression     *float64 `json:"max_regression,omitempty"`
	MaxErrorRateDelta *float64 `json:"max_error_rate_delta,omitempty"`
	MinRequests       *uint64  `json:"min_requests,omitempty"`
	Drift             *bool    `json:"drift,omitempty"`
}

// Spec starts a rollout. Zero values take the defaults.
type Spec struct {
	// Version is the candidate; the incumbent is the version now serving
	// 100 percent of the endpoint.
	Version  string
	Strategy string
	Steps    []Step
	Criteria CriteriaSpec
	// EvaluationInterval is how often the judge looks; EvaluationWindow how
	// far back (never before the current step started).
	EvaluationInterval time.Duration
	EvaluationWindow   time.Duration
	// Keep is how long the losing version stays routed at weight 0 (its
	// replicas up) after the rollout ends.
	Keep time.Duration
	// AcceptWorseMetrics starts the rollout even though the candidate's
	// offline metrics are worse than a serving version's; without it
	// Start answers a *WorseError that says why.
	AcceptWorseMetrics bool
}

// Rollout is a rollout as people see it.
type Rollout struct {
	ID          int64          `json:"id"`
	Team        string         `json:"team"`
	Endpoint    string         `json:"endpoint"`
	FromVersion string         `json:"from_version"`
	ToVersion   string         `json:"to_version"`
	Strategy    string         `json:"strategy"`
	Steps       []Step         `json:"steps"`
	Criteria    judge.Criteria `json:"criteria"`
	StepIndex   int            `json:"step_index"`
	State       string         `json:"state"`
	Paused      bool           `json:"paused"`
	// Reason says why the rollout is where it is: the last state change
	// (who rolled it back, what it waits for) or the last verdict.
	Reason                    string     `json:"reason"`
	StepStartedAt             *time.Time `json:"step_started_at,omitempty"`
	BakeDeadline              *time.Time `json:"bake_deadline,omitempty"`
	LastEvaluatedAt           *time.Time `json:"last_evaluated_at,omitempty"`
	EvaluationIntervalSeconds float64    `json:"evaluation_interval_seconds"`
	EvaluationWindowSeconds   float64    `json:"evaluation_window_seconds"`
	KeepSeconds               float64    `json:"keep_seconds"`
	CleanupAt                 *time.Time `json:"cleanup_at,omitempty"`
	Cleaned                   bool       `json:"cleaned"`
	Initiator                 string     `json:"initiator"`
	// InitiatorEmail is the person who started the rollout: the user, or
	// the creator of the API key used (Initiator is then the key's prefix).
	InitiatorEmail string `json:"initiator_email,omitempty"`
	// StartedBy is how people read the initiator: the person, with the
	// key's prefix when a key was used ("search-admin@example.com via
	// mpk_2939ab12cd34").
	StartedBy  string     `json:"started_by"`
	Generation int64      `json:"generation"`
	CreatedAt  time.Time  `json:"created_at"`
	UpdatedAt  time.Time  `json:"updated_at"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
	// Events (the latest MaxEvents) and Approvals are filled by Get only.
	Events    []Event    `json:"events,omitempty"`
	Approvals []Approval `json:"approvals,omitempty"`

	TeamID          int64  `json:"-"`
	EndpointID      int64  `json:"-"`
	FromVersionID   int64  `json:"-"`
	ToVersionID     int64  `json:"-"`
	ModelID         int64  `json:"-"`
	Task            string `json:"-"`
	MinReplicas     int32  `json:"-"`
	InitiatorUserID *int64 `json:"-"`
}

// Active reports whether the rollout still moves traffic.
func (r Rollout) Active() bool { return Active(r.State) }

// ApprovalStep is the index of the step that waits for a person: the step
// to 100 percent (the last; the only one of a blue-green). A shadow has none
// (-1).
func (r Rollout) ApprovalStep() int {
	if r.Strategy == Shadow {
		return -1
	}
	return len(r.Steps) - 1
}

// Event is one entry of a rollout's timeline.
type Event struct {
	ID        int64          `json:"id"`
	At        time.Time      `json:"at"`
	Kind      string         `json:"kind"`
	StepIndex int            `json:"step_index"`
	State     string         `json:"state"`
	Decision  string         `json:"decision,omitempty"`
	Message   string         `json:"message"`
	Actor     string         `json:"actor,omitempty"`
	Verdict   *judge.Verdict `json:"verdict,omitempty"`
	Windows   *Windows       `json:"windows,omitempty"`
}

// Windows are the numbers one evaluation read, for both versions.
type Windows struct {
	From      time.Time `json:"from"`
	To        time.Time `json:"to"`
	Candidate Summary   `json:"candidate"`
	Incumbent Summary   `json:"incumbent"`
	// Drift is the candidate's output drift from the incumbent over the
	// same window: what the drift check judged, and for a shadow the
	// output agreement shown beside latency and errors. Nil when not
	// measured.
	Drift *judge.Drift `json:"drift,omitempty"`
}

// Summary is one version's window in numbers people read.
type Summary struct {
	Requests  uint64  `json:"requests"`
	Errors    uint64  `json:"errors"`
	Streams   uint64  `json:"streams"`
	P99MS     float64 `json:"p99_ms"`
	P99TPOTMS float64 `json:"p99_tpot_ms"`
}

// Approval is a person's decision on the step to 100 percent.
type Approval struct {
	StepIndex int       `json:"step_index"`
	Approver  string    `json:"approver"`
	Decision  string    `json:"decision"`
	Comment   string    `json:"comment"`
	At        time.Time `json:"at"`
}

// ForbiddenError is a decision the four-eyes rule refuses, with a message
// safe to show (who may not, and why). It matches auth.ErrForbidden.
type ForbiddenError struct{ Msg string }

func (e *ForbiddenError) Error() string { return e.Msg }

// Shown is the message to show the caller.
func (e *ForbiddenError) Shown() string { return e.Msg }

// Is makes errors.Is(err, auth.ErrForbidden) true.
func (e *ForbiddenError) Is(target error) bool { return target == auth.ErrForbidden }

// ConflictError is a request the rollout's state refuses: a second active
// rollout on an endpoint (naming the active one), an approval of a rollout
// that does not wait for one. It matches db.ErrConflict.
type ConflictError struct {
	Msg string
	// ActiveID is the active rollout a start collided with; 0 otherwise.
	ActiveID int64
}

func (e *ConflictError) Error() string { return e.Msg }

// WorseError is Start's answer when the candidate's offline metrics are
// worse than those of a version serving the endpoint and the spec does not
// accept that: the person confirms (Spec.AcceptWorseMetrics) or picks
// another candidate. It is a conflict (409).
type WorseError struct {
	Version string
	// Reasons are the worse metrics, each naming the serving version
	// ("than v23: auc 0.469 < 0.911 (higher is better)").
	Reasons []string
}

func (e *WorseError) Error() string {
	return fmt.Sprintf("version %s has worse offline metrics than the serving version (%s); confirm to start the rollout anyway (accept_worse_metrics)",
		e.Version, strings.Join(e.Reasons, "; "))
}

// Shown is the message to show the caller.
func (e *WorseError) Shown() string { return e.Error() }

// Is makes errors.Is(err, db.ErrConflict) true.
func (e *WorseError) Is(target error) bool { return target == db.ErrConflict }

// worse lists the offline metrics on which to is worse than each version
// serving the endpoint now.
func worse(to db.ModelVersion, serving []db.ModelVersion) []string {
	var cand map[string]float64
	_ = json.Unmarshal(to.OfflineMetrics, &cand)
	var out []string
	for _, s := range serving {
		if s.ID == to.ID {
			continue
		}
		var inc map[string]float64
		_ = json.Unmarshal(s.OfflineMetrics, &inc)
		for _, r := range registry.WorseMetrics(cand, inc) {
			out = append(out, "than "+s.Name+": "+r)
		}
	}
	return out
}

// Shown is the message to show the caller.
func (e *ConflictError) Shown() string { return e.Msg }

// Is makes errors.Is(err, db.ErrConflict) true.
func (e *ConflictError) Is(target error) bool { return target == db.ErrConflict }

// DriftMeasurer measures the output drift of the candidate from the
// incumbent over a window; drift.Gate is one. Without one, the drift gate is
// off by default (a rollout that turns it on holds with "drift not
// measured").
type DriftMeasurer interface {
	Drift(ctx context.Context, endpoint string, endpointID int64, candidate, incumbent string, from, to time.Time) (*judge.Drift, error)
}

// Service is the rollout API for people.
type Service struct {
	pool  *pgxpool.Pool
	clock quartz.Clock
	drift DriftMeasurer
	// onChange tells a controller in this process that something changed;
	// set while requests may be served, hence atomic.
	onChange atomic.Pointer[func()]
	// feed wakes the readers of events after every change (Changes).
	feed feed
}

// New returns a Service on clock (quartz.NewReal() when nil). drift may
// be nil.
func New(pool *pgxpool.Pool, clock quartz.Clock, drift DriftMeasurer) *Service {
	if clock == nil {
		clock = quartz.NewReal()
	}
	return &Service{pool: pool, clock: clock, drift: drift}
}

// OnChange sets what a change calls after it commits: a controller's Wake,
// so that an approval or a rollback acts now instead of at the next tick.
// A controller in another process notices at its next tick (a second).
func (s *Service) OnChange(fn func()) {
	s.onChange.Store(&fn)
}

func (s *Service) wake() {
	s.Changed()
	if fn := s.onChange.Load(); fn != nil && *fn != nil {
		(*fn)()
	}
}

// system is the principal the controller reads every team's rollouts as
// and records its own changes under.
var system = auth.System("rollout-controller")

func fromRow(r db.RolloutGetRow) Rollout {
	out := Rollout{ID: r.ID, Team: r.Team, Endpoint: r.Endpoint, FromVersion: r.FromVersion, ToVersion: r.ToVersion,
		Strategy: r.Strategy, StepIndex: int(r.StepIndex), State: r.State, Paused: r.Paused, Reason: r.Reason,
		StepStartedAt: r.StepStartedAt, BakeDeadline: r.BakeDeadline, LastEvaluatedAt: r.LastEvaluatedAt,
		EvaluationIntervalSeconds: float64(r.EvalIntervalMs) / 1000, EvaluationWindowSeconds: float64(r.EvalWindowMs) / 1000,
		KeepSeconds: float64(r.KeepMs) / 1000, CleanupAt: r.CleanupAt, Cleaned: r.Cleaned, Initiator: r.Initiator,
		Generation: r.Generation, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt, FinishedAt: r.FinishedAt,
		TeamID: r.TeamID, EndpointID: r.EndpointID, FromVersionID: r.FromVersionID, ToVersionID: r.ToVersionID,
		ModelID: r.ModelID, Task: r.Task, MinReplicas: r.MinReplicas, InitiatorUserID: r.InitiatorUserID, InitiatorEmail: r.InitiatorEmail}
	out.StartedBy = out.Initiator
	if out.InitiatorEmail != "" && out.InitiatorEmail != out.Initiator {
		out.StartedBy = out.InitiatorEmail + " via " + out.Initiator
	}
	// Both columns are JSON this package wrote.
	_ = json.Unmarshal(r.Steps, &out.Steps)
	_ = json.Unmarshal(r.Criteria, &out.Criteria)
	return out
}

func ms(d time.Duration) int64 { return d.Milliseconds() }

func checkSteps(errs *field.Errors, strategy string, steps []Step) {
	if len(steps) == 0 || len(steps) > 20 {
		errs.Add("steps", "must have between 1 and 20 steps")
		return
	}
	for i, st := range steps {
		f := fmt.Sprintf("steps[%d]", i)
		if st.Percent < 1 || st.Percent > 100 {
			errs.Add(f+".percent", "must be between 1 and 100")
		}
		if math.IsNaN(st.BakeSeconds) || st.BakeSeconds < 0 || st.BakeSeconds > 7*24*3600 {
			errs.Add(f+".bake_seconds", "must be between 0 and 604800 (a week)")
		}
		if i > 0 && st.Percent <= steps[i-1].Percent {
			errs.Add(f+".percent", "must be above the previous step's")
		}
	}
	switch strategy {
	case Canary:
		if steps[len(steps)-1].Percent != 100 {
			errs.Add("steps", "a canary's last step must be 100 percent")
		}
		if len(steps) == 1 && steps[0].Percent == 100 {
			// Nothing would be judged before all traffic moved.
			errs.Add("steps", "a canary needs at least one step below 100 percent; to switch all traffic at once use strategy blue-green")
		}
	case BlueGreen:
		if len(steps) != 1 || steps[0].Percent != 100 {
			errs.Add("steps", "a blue-green rollout has one step of 100 percent (its bake is the rollback window)")
		}
	case Shadow:
		if len(steps) != 1 {
			errs.Add("steps", "a shadow rollout has one step: the mirrored percentage")
		}
	}
}

func checkDuration(errs *field.Errors, field string, d, lo, hi time.Duration) {
	if d < lo || d > hi {
		errs.Add(field, "must be between %s and %s", lo, hi)
	}
}

// defaults fills the zero fields of spec and validates it.
func (s *Service) defaults(spec *Spec) error {
	var errs field.Errors
	if spec.Version == "" {
		errs.Add("version", "is required")
	}
	if spec.Strategy == "" {
		spec.Strategy = Canary
	}
	field.OneOf(&errs, "strategy", spec.Strategy, Canary, BlueGreen, Shadow)
	if spec.Steps == nil {
		switch spec.Strategy {
		case BlueGreen:
			spec.Steps = DefaultBlueGreenSteps
		case Shadow:
			spec.Steps = DefaultShadowSteps
		default:
			spec.Steps = DefaultCanarySteps
		}
	}
	checkSteps(&errs, spec.Strategy, spec.Steps)
	if spec.EvaluationInterval == 0 {
		spec.EvaluationInterval = DefaultEvaluationInterval
	}
	if spec.EvaluationWindow == 0 {
		spec.EvaluationWindow = max(DefaultEvaluationWindow, spec.EvaluationInterval)
	}
	if spec.Keep == 0 {
		spec.Keep = DefaultKeep
	}
	checkDuration(&errs, "evaluation_interval_seconds", spec.EvaluationInterval, 500*time.Millisecond, time.Hour)
	checkDuration(&errs, "evaluation_window_seconds", spec.EvaluationWindow, time.Second, 24*time.Hour)
	checkDuration(&errs, "keep_seconds", spec.Keep, 0, 7*24*time.Hour)
	return errs.Err()
}

// DriftSamplingOff is the note a rollout's start records when the drift
// gate, on by default for its task, is off because the endpoint samples no
// predictions.
const DriftSamplingOff = "drift gate off: the endpoint samples no predictions (sampling_rate 0)"

// DriftBlueGreenOff is the note a blue-green rollout's start records when
// the drift gate, on by default for its task, is off: after the switch the
// incumbent serves nothing, so no outputs of it share the candidate's window.
const DriftBlueGreenOff = "drift gate off: a blue-green candidate serves alone after the switch, with no incumbent outputs to compare"

// criteria are the defaults from the candidate's SLA with spec's overrides.
// The drift gate needs prediction samples: with the endpoint's sampling off
// (sampling 0) a default gate is turned off, and note says so for the start
// event; a gate asked for explicitly is a field error, since it would hold
// the rollout forever on "too few samples".
func (s *Service) criteria(task, strategy string, slaP99, slaTPOT *float64, sampling float64, o CriteriaSpec) (c judge.Criteria, note string, err error) {
	deref := func(p *float64) float64 {
		if p == nil {
			return 0
		}
		return *p
	}
	c = judge.DefaultCriteria(task, deref(slaP99), deref(slaTPOT))
	// Drift gates only where something measures it; otherwise every
	// classification rollout would hold forever on "drift not measured".
	c.Drift = c.Drift && s.drift != nil
	if c.Drift && sampling <= 0 && o.Drift == nil {
		c.Drift, note = false, DriftSamplingOff
	}
	if c.Drift && strategy == BlueGreen && o.Drift == nil {
		c.Drift, note = false, DriftBlueGreenOff
	}
	if o.MaxP99MS != nil {
		c.MaxP99MS = *o.MaxP99MS
	}
	if o.MaxP99TPOTMS != nil {
		c.MaxP99TPOTMS = *o.MaxP99TPOTMS
	}
	if o.MaxRegression != nil {
		c.MaxRegression = *o.MaxRegression
	}
	if o.MaxErrorRateDelta != nil {
		c.MaxErrorRateDelta = *o.MaxErrorRateDelta
	}
	if o.MinRequests != nil {
		c.MinRequests = *o.MinRequests
	}
	var errs field.Errors
	if o.Drift != nil {
		c.Drift = *o.Drift
		if c.Drift && strategy == BlueGreen {
			errs.Add("criteria.drift", "a blue-green candidate serves alone after the switch, so no incumbent outputs share its window and the gate would hold forever; pass drift: false or use a canary")
		} else if c.Drift && s.drift == nil {
			errs.Add("criteria.drift", "this control plane measures no drift (ClickHouse prediction samples are not configured), so the rollout would hold forever; pass drift: false")
		} else if c.Drift && sampling <= 0 {
			errs.Add("criteria.drift", "the endpoint samples no predictions (sampling_rate 0), so drift cannot be measured and the rollout would hold forever; "+
				"turn sampling on in the endpoint's settings (a sampling_rate above 0) or pass drift: false")
		}
	}
	c.Validate(&errs, "criteria")
	return c, note, errs.Err()
}

// Start starts a rollout of spec.Version on the endpoint, from the version
// that serves 100 percent of it now. A second active rollout is a
// ConflictError naming the first.
func (s *Service) Start(ctx context.Context, p *auth.Principal, endpointName string, spec Spec) (Rollout, error) {
	if err := s.defaults(&spec); err != nil {
		return Rollout{}, err
	}
	all, ids := p.Scope()
	var id int64
	err := db.InTx(ctx, s.pool, func(q *db.Queries) error {
		e, err := q.EndpointGet(ctx, db.EndpointGetParams{Name: endpointName, AllTeams: all, TeamIDs: ids})
		if err != nil {
			return fmt.Errorf("endpoint %s: %w", endpointName, err)
		}
		if !p.CanWrite(e.TeamID) {
			return auth.ErrForbidden
		}
		// A version the endpoint's hardware cannot serve is refused here;
		// insert's other checks hold for every rollout, a shadow's canary
		// included (its version passed this one when the shadow started).
		if to, err := q.ModelVersionGet(ctx, db.ModelVersionGetParams{ModelID: e.ModelID, Name: spec.Version, AllTeams: all, TeamIDs: ids}); err == nil {
			serving, err := registry.ServingOn(ctx, q, p, e.ID, e.ModelID)
			if err != nil {
				return err
			}
			if why := registry.Unfit(to, serving); why != "" {
				return field.Errors{{Field: "version", Message: why}}
			}
			if reasons := worse(to, serving); len(reasons) > 0 && !spec.AcceptWorseMetrics {
				return &WorseError{Version: to.Name, Reasons: reasons}
			}
		} else if !errors.Is(err, db.ErrNotFound) {
			return err
		}
		id, err = s.insert(ctx, q, p, e.ID, e.TeamID, e.ModelID, e.ModelTask, e.Name, spec)
		return err
	})
	if err != nil {
		return Rollout{}, fmt.Errorf("start rollout: %w", err)
	}
	s.wake()
	return s.Get(ctx, p, id)
}

// insert creates the rollout row with its first event, in q's transaction.
func (s *Service) insert(ctx context.Context, q *db.Queries, p *auth.Principal, endpointID, teamID, modelID int64, task, endpointName string, spec Spec) (int64, error) {
	all, ids := p.Scope() // the scope the endpoint was resolved with
	if active, err := q.RolloutActiveByEndpoint(ctx, db.RolloutActiveByEndpointParams{EndpointID: endpointID, AllTeams: all, TeamIDs: ids}); err == nil {
		return 0, &ConflictError{ActiveID: active.ID,
			Msg: fmt.Sprintf("endpoint %s already has an active rollout: %d (to %s, %s)", endpointName, active.ID, active.ToVersion, active.State)}
	} else if !errors.Is(err, db.ErrNotFound) {
		return 0, err
	}
	to, err := q.ModelVersionGet(ctx, db.ModelVersionGetParams{ModelID: modelID, Name: spec.Version, AllTeams: all, TeamIDs: ids})
	if err != nil {
		if errors.Is(err, db.ErrNotFound) {
			return 0, field.Errors{{Field: "version", Message: "no such version of the endpoint's model"}}
		}
		return 0, err
	}
	if why, err := registry.Unroutable(ctx, q, p, to); err != nil {
		return 0, err
	} else if why != "" {
		return 0, field.Errors{{Field: "version", Message: why}}
	}
	rules, err := q.RoutingRuleListByEndpoint(ctx, db.RoutingRuleListByEndpointParams{EndpointID: endpointID, AllTeams: all, TeamIDs: ids})
	if err != nil {
		return 0, err
	}
	var fromID int64
	for _, r := range rules {
		if r.Weight == 100 {
			fromID = r.VersionID
		}
	}
	switch {
	case fromID == 0:
		return 0, field.Errors{{Field: "version", Message: "a rollout starts from one version serving 100 percent of the endpoint; set the traffic first"}}
	case fromID == to.ID:
		return 0, field.Errors{{Field: "version", Message: spec.Version + " already serves 100 percent of the endpoint"}}
	}
	arms, err := q.RolloutExperimentArms(ctx, db.RolloutExperimentArmsParams{EndpointID: endpointID, AllTeams: all, TeamIDs: ids})
	if err != nil {
		return 0, err
	}
	for _, a := range arms {
		if a.VersionID == fromID || a.VersionID == to.ID {
			// The experiment splits users over this version by a hash the
			// rollout's weights do not see: the judge's windows would mix
			// the two, and the rollout's end would leave an arm behind.
			return 0, field.Errors{{Field: "version", Message: fmt.Sprintf(
				"the endpoint's A/B experiment %q has an arm of %s; end the experiment before a rollout of this endpoint", a.Experiment, a.Version)}}
		}
	}
	ep, err := q.EndpointGet(ctx, db.EndpointGetParams{Name: endpointName, AllTeams: all, TeamIDs: ids})
	if err != nil {
		return 0, fmt.Errorf("endpoint %s: %w", endpointName, err)
	}
	crit, note, err := s.criteria(task, spec.Strategy, to.P99LatencyMs, to.P99TPOTMs, ep.SamplingRate, spec.Criteria)
	if err != nil {
		return 0, err
	}
	stepsJSON, _ := json.Marshal(spec.Steps)
	critJSON, _ := json.Marshal(crit)
	var uid *int64
	if h := p.HumanID(); h != 0 {
		uid = &h
	}
	now := s.clock.Now()
	id, err := q.RolloutCreate(ctx, db.RolloutCreateParams{TeamID: teamID, EndpointID: endpointID, FromVersionID: fromID, ToVersionID: to.ID,
		Strategy: spec.Strategy, Steps: stepsJSON, Criteria: critJSON, EvalIntervalMs: ms(spec.EvaluationInterval),
		EvalWindowMs: ms(spec.EvaluationWindow), KeepMs: ms(spec.Keep), Initiator: p.Actor(), InitiatorUserID: uid, Now: now})
	if err != nil {
		if errors.Is(err, db.ErrConflict) {
			// Another start won the race between the check and the insert.
			return 0, &ConflictError{Msg: fmt.Sprintf("endpoint %s already has an active rollout", endpointName)}
		}
		return 0, err
	}
	t, err := lockTx(ctx, q, id, now, p)
	if err != nil {
		return 0, err
	}
	msg := fmt.Sprintf("%s rollout of %s started by %s", spec.Strategy, spec.Version, p.Who())
	if note != "" {
		msg += "; " + note
	}
	return id, t.save(ctx, "start", msg)
}

func (s *Service) load(ctx context.Context, p *auth.Principal, id int64) (Rollout, error) {
	all, ids := p.Scope()
	r, err := db.New(s.pool).RolloutGet(ctx, db.RolloutGetParams{ID: id, AllTeams: all, TeamIDs: ids})
	if err != nil {
		return Rollout{}, fmt.Errorf("rollout %d: %w", id, err)
	}
	return fromRow(r), nil
}

// Get returns a rollout with its timeline and approvals.
func (s *Service) Get(ctx context.Context, p *auth.Principal, id int64) (Rollout, error) {
	r, err := s.load(ctx, p, id)
	if err != nil {
		return Rollout{}, err
	}
	if r.Events, err = s.recentEvents(ctx, p, id, MaxEvents); err != nil {
		return Rollout{}, err
	}
	all, ids := p.Scope()
	aps, err := db.New(s.pool).ApprovalList(ctx, db.ApprovalListParams{RolloutID: id, AllTeams: all, TeamIDs: ids})
	if err != nil {
		return Rollout{}, fmt.Errorf("rollout %d approvals: %w", id, err)
	}
	for _, a := range aps {
		r.Approvals = append(r.Approvals, Approval{StepIndex: int(a.StepIndex), Approver: a.Approver, Decision: a.Decision, Comment: a.Comment, At: a.At})
	}
	return r, nil
}

// MaxEvents is how many of its latest events Get returns with a rollout.
const MaxEvents = 500

// Events returns a rollout's events after the given id, oldest first.
func (s *Service) Events(ctx context.Context, p *auth.Principal, id, afterID int64, limit int) ([]Event, error) {
	all, ids := p.Scope()
	rows, err := db.New(s.pool).RolloutEventList(ctx, db.RolloutEventListParams{RolloutID: id, AfterID: afterID, Lim: int32(limit), AllTeams: all, TeamIDs: ids})
	if err != nil {
		return nil, fmt.Errorf("rollout %d events: %w", id, err)
	}
	return events(rows), nil
}

// recentEvents returns a rollout's latest limit events, oldest first.
func (s *Service) recentEvents(ctx context.Context, p *auth.Principal, id int64, limit int) ([]Event, error) {
	all, ids := p.Scope()
	rows, err := db.New(s.pool).RolloutEventListRecent(ctx, db.RolloutEventListRecentParams{RolloutID: id, Lim: int32(limit), AllTeams: all, TeamIDs: ids})
	if err != nil {
		return nil, fmt.Errorf("rollout %d events: %w", id, err)
	}
	return events(rows), nil
}

func events(rows []db.RolloutEvent) []Event {
	out := make([]Event, 0, len(rows))
	for _, e := range rows {
		ev := Event{ID: e.ID, At: e.At, Kind: e.Kind, StepIndex: int(e.StepIndex), State: e.State, Decision: e.Decision, Message: e.Message, Actor: e.Actor}
		if len(e.Verdict) > 0 {
			ev.Verdict = &judge.Verdict{}
			_ = json.Unmarshal(e.Verdict, ev.Verdict)
		}
		if len(e.Windows) > 0 {
			ev.Windows = &Windows{}
			_ = json.Unmarshal(e.Windows, ev.Windows)
		}
		out = append(out, ev)
	}
	return out
}

// List returns the endpoint's rollouts, newest first.
func (s *Service) List(ctx context.Context, p *auth.Principal, endpointName string, limit int) ([]Rollout, error) {
	all, ids := p.Scope()
	q := db.New(s.pool)
	e, err := q.EndpointGet(ctx, db.EndpointGetParams{Name: endpointName, AllTeams: all, TeamIDs: ids})
	if err != nil {
		return nil, fmt.Errorf("endpoint %s: %w", endpointName, err)
	}
	rows, err := q.RolloutListByEndpoint(ctx, db.RolloutListByEndpointParams{EndpointID: e.ID, Lim: int32(limit), AllTeams: all, TeamIDs: ids})
	if err != nil {
		return nil, fmt.Errorf("list rollouts of %s: %w", endpointName, err)
	}
	out := make([]Rollout, len(rows))
	for i, r := range rows {
		out[i] = fromRow(db.RolloutGetRow(r))
	}
	return out, nil
}

// ListAll returns the rollouts of every endpoint p may see, newest first,
// in the given states (every state when states is empty), at most limit.
func (s *Service) ListAll(ctx context.Context, p *auth.Principal, states []string, limit int) ([]Rollout, error) {
	all, ids := p.Scope()
	if states == nil {
		states = []string{}
	}
	rows, err := db.New(s.pool).RolloutList(ctx, db.RolloutListParams{AllTeams: all, TeamIDs: ids, States: states, Lim: int32(limit)})
	if err != nil {
		return nil, fmt.Errorf("list rollouts: %w", err)
	}
	out := make([]Rollout, len(rows))
	for i, r := range rows {
		out[i] = fromRow(db.RolloutGetRow(r))
	}
	return out, nil
}

// States lists every state a rollout can be in, active ones first.
var States = []string{StateStarting, StateProgressing, StateAwaitingApproval, StatePromoted, StateRolledBack, StateCompleted}

// AwaitingApproval returns the rollouts waiting for an approval that p may
// give: of teams p administers, started by someone else.
func (s *Service) AwaitingApproval(ctx context.Context, p *auth.Principal) ([]Rollout, error) {
	all, ids := p.Scope()
	rows, err := db.New(s.pool).RolloutListAwaitingApproval(ctx, db.RolloutListAwaitingApprovalParams{AllTeams: all, TeamIDs: ids})
	if err != nil {
		return nil, fmt.Errorf("rollouts awaiting approval: %w", err)
	}
	out := []Rollout{}
	for _, row := range rows {
		r := fromRow(db.RolloutGetRow(row))
		if CanApprove(p, r) {
			out = append(out, r)
		}
	}
	return out, nil
}

// Initiated reports whether p started r. The human behind each side is
// compared (a user, or the creator of the API key used), so a person who
// started a rollout in the portal cannot approve it with a key of theirs,
// nor the reverse.
func Initiated(p *auth.Principal, r Rollout) bool {
	if h := p.HumanID(); h != 0 && r.InitiatorUserID != nil {
		return *r.InitiatorUserID == h
	}
	return p.Actor() == r.Initiator
}

// CanApprove reports whether p may approve or reject r now: r waits for an
// approval nobody gave yet (as far as r.Approvals, filled by Get, says), p
// administers r's team and did not start r (four eyes).
func CanApprove(p *auth.Principal, r Rollout) bool {
	for _, a := range r.Approvals {
		if a.StepIndex == r.ApprovalStep() {
			return false
		}
	}
	return r.State == StateAwaitingApproval && p.CanAdmin(r.TeamID) && p.HumanID() != 0 && !Initiated(p, r)
}

// CanOperate reports whether p may roll back, pause or resume r.
func CanOperate(p *auth.Principal, r Rollout) bool { return r.Active() && p.CanWrite(r.TeamID) }

// act runs fn on the locked rollout id for p (who must be able to write
// its team), then wakes the controller.
func (s *Service) act(ctx context.Context, p *auth.Principal, id int64, what string, fn func(t *tx) error) (Rollout, error) {
	err := db.InTx(ctx, s.pool, func(q *db.Queries) error {
		t, err := lockTx(ctx, q, id, s.clock.Now(), p)
		if err != nil {
			return err
		}
		if !p.CanWrite(t.r.TeamID) {
			return auth.ErrForbidden
		}
		if err := fn(t); err != nil {
			return err
		}
		return t.finish(ctx)
	})
	if err != nil {
		return Rollout{}, fmt.Errorf("%s rollout %d: %w", what, id, err)
	}
	s.wake()
	return s.Get(ctx, p, id)
}

func notActive(r Rollout) error {
	return &ConflictError{Msg: fmt.Sprintf("rollout %d is %s, no longer active", r.ID, r.State)}
}

// Approve approves the step to 100 percent; the controller then promotes.
// Only a team admin who did not start the rollout may, and only while it
// waits. The approval is a row: a restarted controller finds it and never
// asks again.
func (s *Service) Approve(ctx context.Context, p *auth.Principal, id int64, comment string) (Rollout, error) {
	return s.decide(ctx, p, id, "approve", comment)
}

// Reject refuses the step to 100 percent, which rolls the rollout back.
func (s *Service) Reject(ctx context.Context, p *auth.Principal, id int64, comment string) (Rollout, error) {
	return s.decide(ctx, p, id, "reject", comment)
}

func (s *Service) decide(ctx context.Context, p *auth.Principal, id int64, decision, comment string) (Rollout, error) {
	if len(comment) > 2000 {
		return Rollout{}, field.Errors{{Field: "comment", Message: "must be at most 2000 characters"}}
	}
	return s.act(ctx, p, id, decision, func(t *tx) error {
		if !p.CanAdmin(t.r.TeamID) {
			return auth.ErrForbidden
		}
		if t.r.State != StateAwaitingApproval {
			return &ConflictError{Msg: fmt.Sprintf("rollout %d is %s, not waiting for approval", t.r.ID, t.r.State)}
		}
		if p.HumanID() == 0 {
			// Four eyes needs to know whose eyes: an API key nobody owns
			// could be anyone's, the initiator's included.
			return &ForbiddenError{Msg: "approving or rejecting a rollout needs a person: this API key has no known owner (four eyes cannot tell whose it is); use the portal or a key you created"}
		}
		if Initiated(p, t.r) {
			return &ForbiddenError{Msg: "the person who started a rollout cannot approve or reject it (four eyes), neither in the portal nor through an API key they created"}
		}
		uid := new(p.HumanID())
		err := t.q.ApprovalInsert(ctx, db.ApprovalInsertParams{RolloutID: t.r.ID, TeamID: t.r.TeamID, StepIndex: int32(t.r.ApprovalStep()),
			Approver: p.Who(), ApproverUserID: uid, Decision: decision, Comment: comment, At: t.now})
		if err != nil {
			if errors.Is(err, db.ErrConflict) {
				return &ConflictError{Msg: fmt.Sprintf("rollout %d already has a decision for this step", t.r.ID)}
			}
			return err
		}
		msg := fmt.Sprintf("%s %sd the step to 100 percent", p.Who(), decision)
		if comment != "" {
			msg += ": " + comment
		}
		if err := t.event(ctx, "approval", decision, msg, nil, nil); err != nil {
			return err
		}
		if err := t.audit(ctx, decision, t.view(), decisionView{auditView: t.view(), Decision: decision, Comment: comment}); err != nil {
			return err
		}
		if decision == "reject" {
			return t.rollback(ctx, "rejected by "+p.Who())
		}
		// The controller promotes on its next pass (woken now); doing it
		// here too would be a second path to the same change.
		return nil
	})
}

// Rollback moves all traffic back to the incumbent now.
func (s *Service) Rollback(ctx context.Context, p *auth.Principal, id int64, reason string) (Rollout, error) {
	return s.act(ctx, p, id, "roll back", func(t *tx) error {
		if !t.r.Active() {
			return notActive(t.r)
		}
		msg := "rolled back by " + p.Who()
		if reason != "" {
			msg += ": " + reason
		}
		return t.rollback(ctx, msg)
	})
}

// Pause stops the judge and the steps; the weights stay where they are.
func (s *Service) Pause(ctx context.Context, p *auth.Principal, id int64) (Rollout, error) {
	return s.act(ctx, p, id, "pause", func(t *tx) error {
		if !t.r.Active() {
			return notActive(t.r)
		}
		if t.r.Paused {
			return nil
		}
		t.r.Paused = true
		return t.save(ctx, "pause", "paused by "+p.Who())
	})
}

// Resume continues a paused rollout; the current step bakes again from now,
// so a pause never counts as bake time.
func (s *Service) Resume(ctx context.Context, p *auth.Principal, id int64) (Rollout, error) {
	return s.act(ctx, p, id, "resume", func(t *tx) error {
		if !t.r.Active() {
			return notActive(t.r)
		}
		if !t.r.Paused {
			return nil
		}
		t.r.Paused = false
		if t.r.StepStartedAt != nil {
			t.startStep(t.r.StepIndex)
		}
		return t.save(ctx, "resume", "resumed by "+p.Who())
	})
}

// CanaryFromShadow ends an active shadow rollout and starts a canary of the
// same candidate with the default steps and the shadow's criteria and
// timings. The canary's analysis starts from scratch.
func (s *Service) CanaryFromShadow(ctx context.Context, p *auth.Principal, id int64) (Rollout, error) {
	var newID int64
	_, err := s.act(ctx, p, id, "start canary from", func(t *tx) error {
		if t.r.Strategy != Shadow || !t.r.Active() {
			return &ConflictError{Msg: fmt.Sprintf("rollout %d is not an active shadow", t.r.ID)}
		}
		if err := t.setWeights(ctx, 0, 0); err != nil {
			return err
		}
		t.r.State, t.r.Cleaned = StateCompleted, true
		t.r.FinishedAt = &t.now
		if err := t.save(ctx, "complete", "shadow ended by "+p.Who()+"; a canary of "+t.r.ToVersion+" follows"); err != nil {
			return err
		}
		d := func(sec float64) time.Duration { return time.Duration(sec * float64(time.Second)) }
		c := t.r.Criteria
		spec := Spec{Version: t.r.ToVersion, Strategy: Canary, Steps: DefaultCanarySteps,
			Criteria: CriteriaSpec{MaxP99MS: &c.MaxP99MS, MaxP99TPOTMS: &c.MaxP99TPOTMS, MaxRegression: &c.MaxRegression,
				MaxErrorRateDelta: &c.MaxErrorRateDelta, MinRequests: &c.MinRequests, Drift: &c.Drift},
			EvaluationInterval: d(t.r.EvaluationIntervalSeconds), EvaluationWindow: d(t.r.EvaluationWindowSeconds), Keep: d(t.r.KeepSeconds)}
		if err := s.defaults(&spec); err != nil {
			return err
		}
		var err error
		newID, err = s.insert(ctx, t.q, p, t.r.EndpointID, t.r.TeamID, t.r.ModelID, t.r.Task, t.r.Endpoint, spec)
		return err
	})
	if err != nil {
		return Rollout{}, err
	}
	return s.Get(ctx, p, newID)
}
