// Package endpoint owns inference endpoints: their settings and the traffic
// split over model versions. Placement of replicas is package placement's job;
// an endpoint stays "pending" until then. Lookups are scoped to the caller's
// teams in SQL, and every change is written with its audit record in one
// transaction.
package endpoint

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"modelplane/audit"
	"modelplane/auth"
	"modelplane/busapi"
	"modelplane/db"
	"modelplane/field"
	"modelplane/registry"
	"modelplane/replica"
)

// Tiers keep workloads of different criticality apart on the fleet.
var Tiers = []string{"critical", "standard", "batch"}

// InstanceProfiles are the allocations a replica can ask for: CPU cores
// and memory on a CPU node ("cpu", sized from the version's resources),
// a whole GPU of a type, or a MIG slice. A version that needs no GPU
// (gpu_count 0) is served on a CPU node whatever the profile; a GPU
// profile sizes GPU versions only.
var InstanceProfiles = []string{ProfileCPU, "gpu-a100-80gb", "gpu-h100-80gb", "mig-1g.10gb", "mig-2g.20gb", "mig-3g.40gb", "mig-4g.40gb", "mig-7g.80gb"}

// ProfileCPU is the instance profile of CPU serving, and the default of an
// endpoint whose version needs no GPU.
const ProfileCPU = "cpu"

// Endpoint is a served endpoint.
type Endpoint struct {
	ID      int64  `json:"-"`
	TeamID  int64  `json:"-"`
	ModelID int64  `json:"-"`
	Name    string `json:"name"`
	Team    string `json:"team"`
	Model   string `json:"model"`
	Task    string `json:"task"`
	// Kind is KindGraph for a graph endpoint (its model's task is graph),
	// KindModel otherwise.
	Kind            string  `json:"kind" enum:"model,graph"`
	Runtime         string  `json:"runtime"`
	InstanceProfile string  `json:"instance_profile"`
	MinReplicas     int32   `json:"min_replicas"`
	MaxReplicas     int32   `json:"max_replicas"`
	Tier            string  `json:"tier"`
	SamplingRate    float64 `json:"sampling_rate"`
	RetentionDays   int32   `json:"retention_days"`
	Status          string  `json:"status"`
	// PlacementError says why replicas could not be placed; empty when they were.
	PlacementError string   `json:"placement_error"`
	Traffic        []Weight `json:"traffic"`
	// Experiment is the active A/B experiment; nil when none.
	Experiment *Experiment `json:"experiment,omitempty"`
	// RateLimitRPS, RateLimitBurst and TimeoutMS are the gateway settings;
	// 0 means the gateway's default.
	RateLimitRPS   float64 `json:"rate_limit_rps"`
	RateLimitBurst int32   `json:"rate_limit_burst"`
	TimeoutMS      int32   `json:"timeout_ms"`
	// Batching is the built-in runtime's dynamic batcher of its replicas.
	Batching Batching `json:"batching"`
	// Replicas are filled by Get only.
	Replicas  []Replica `json:"replicas,omitzero"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// Replica is one running (or starting) copy of a version, where it runs and
// the GPU slices it holds.
type Replica struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	Node    string `json:"node"`
	State   string `json:"state"`
	Addr    string `json:"addr,omitempty"`
	Reason  string `json:"reason,omitempty"`
	// Failures counts the replica's failures in a row on its node; at
	// fleet.MoveAfterFailures it is placed on another node.
	Failures int32 `json:"failures,omitempty"`
	// PlacementNote says which nodes placement avoided for it and why.
	PlacementNote string    `json:"placement_note,omitempty"`
	GPUType       string    `json:"gpu_type"`
	Profile       string    `json:"profile"`
	Slots         []string  `json:"slots"`
	CreatedAt     time.Time `json:"created_at"`
	UpdatedAt     time.Time `json:"updated_at"`
	// Metrics are the replica's load and cold start as its node last
	// reported them.
	Metrics replica.Metrics `json:"metrics"`
	// Launch is what its node runs for it: the command line, environment
	// (secrets hidden) and generated files. Only Service.Replicas fills
	// it; an endpoint's own reads leave it out, to stay small.
	Launch *busapi.Launch `json:"launch,omitempty" doc:"What the node runs for the replica: the command line as executed, its environment with secrets as <secret>, and the files generated for the runtime (Triton's config.pbtxt), each cut to 4 KiB and 8 KiB in all (truncated says so). Absent until the replica's runtime started, and on simulated nodes, which launch no process."`
}

// Weight is one version's share of traffic, in percent. A version of weight
// 0 may be a shadow: ShadowPercent of the endpoint's requests are mirrored
// to it, and its answers never reach the caller.
type Weight struct {
	Version       string  `json:"version"`
	Weight        int32   `json:"weight"`
	ShadowPercent float64 `json:"shadow_percent,omitempty" minimum:"0" maximum:"100" doc:"Share of the endpoint's requests mirrored to this version (weight 0 only)."`
}

// Settings are the changeable settings of an endpoint.
type Settings struct {
	InstanceProfile string
	MinReplicas     int32
	MaxReplicas     int32
	Tier            string
	SamplingRate    float64
	RetentionDays   int32
	// RateLimitRPS bounds the endpoint's requests per second, across
	// callers, at each gateway, in bursts of RateLimitBurst (the rate
	// rounded up when 0); TimeoutMS bounds one request upstream. 0 means
	// the gateway's default.
	RateLimitRPS   float64
	RateLimitBurst int32
	TimeoutMS      int32
	// Batching is the built-in runtime's dynamic batcher; the zero value
	// means DefaultBatching. A change reaches the replicas in their spec,
	// and the agent restarts each replica whose spec changed.
	Batching Batching
}

// Spec creates an endpoint.
type Spec struct {
	Name    string
	Model   string
	Version string
	// Runtime is derived: empty means the version's runtime, and any
	// other value must be it, since a version's runtime decides how it is
	// served (docs/decisions.md, "CPU nodes").
	Runtime string
	Settings
}

// Service manages endpoints.
type Service struct {
	pool     *pgxpool.Pool
	onChange atomic.Pointer[func()]
}

// New returns a Service.
func New(pool *pgxpool.Pool) *Service { return &Service{pool: pool} }

// OnChange sets what a change of an endpoint's demand calls after it
// commits (create, update, delete, traffic, experiment, autoscaling): the
// fleet reconciler's Wake, so that a new endpoint's replica is placed now
// instead of at the next tick. The call only wakes: the reconciler reads
// the whole demand again, so a lost wake costs at most one tick.
func (s *Service) OnChange(fn func()) {
	s.onChange.Store(&fn)
}

func (s *Service) changed() {
	if fn := s.onChange.Load(); fn != nil && *fn != nil {
		(*fn)()
	}
}

func checkSettings(errs *field.Errors, s Settings) {
	field.OneOf(errs, "instance_profile", s.InstanceProfile, InstanceProfiles...)
	field.OneOf(errs, "tier", s.Tier, Tiers...)
	if s.MinReplicas < 0 || s.MinReplicas > 1000 {
		errs.Add("min_replicas", "must be between 0 and 1000")
	}
	if s.MaxReplicas < 1 || s.MaxReplicas > 1000 {
		errs.Add("max_replicas", "must be between 1 and 1000")
	}
	if s.MinReplicas > s.MaxReplicas {
		errs.Add("min_replicas", "must not exceed max_replicas")
	}
	if !(s.SamplingRate >= 0 && s.SamplingRate <= 1) {
		errs.Add("sampling_rate", "must be between 0 and 1")
	}
	if s.RetentionDays < 1 || s.RetentionDays > 3650 {
		errs.Add("retention_days", "must be between 1 and 3650")
	}
	if !(s.RateLimitRPS >= 0 && s.RateLimitRPS <= 1_000_000) {
		errs.Add("rate_limit_rps", "must be between 0 (the gateway's default) and 1000000")
	}
	if s.RateLimitBurst < 0 || s.RateLimitBurst > 1_000_000 {
		errs.Add("rate_limit_burst", "must be between 0 (the rate, rounded up) and 1000000")
	}
	if s.TimeoutMS < 0 || s.TimeoutMS > 3_600_000 {
		errs.Add("timeout_ms", "must be between 0 (the gateway's default) and 3600000")
	}
	checkBatching(errs, s.Batching)
}

// Create creates an endpoint serving one version of a model at 100 percent.
func (s *Service) Create(ctx context.Context, p *auth.Principal, spec Spec) (Endpoint, error) {
	var errs field.Errors
	field.Name(&errs, "name", spec.Name)
	if spec.Model == "" {
		errs.Add("model", "is required")
	}
	if spec.Version == "" {
		errs.Add("version", "is required")
	}
	if spec.Runtime != "" {
		field.OneOf(&errs, "runtime", spec.Runtime, registry.Runtimes...)
	}
	// The instance profile may wait for the version: its default depends
	// on whether the version needs a GPU.
	profile := spec.InstanceProfile
	spec.InstanceProfile = cmp.Or(profile, ProfileCPU)
	spec.Batching = spec.Batching.orDefault()
	checkSettings(&errs, spec.Settings)
	if err := errs.Err(); err != nil {
		return Endpoint{}, err
	}
	all, ids := p.Scope()
	var out Endpoint
	err := db.InTx(ctx, s.pool, func(q *db.Queries) error {
		m, err := q.ModelGet(ctx, db.ModelGetParams{Name: spec.Model, AllTeams: all, TeamIDs: ids})
		if err != nil {
			if errors.Is(err, db.ErrNotFound) {
				return field.Errors{{Field: "model", Message: "no such model"}}
			}
			return err
		}
		if !p.CanWrite(m.TeamID) {
			return auth.ErrForbidden
		}
		if m.Task == KindGraph {
			return field.Errors{{Field: "model", Message: "is a graph's model: a graph endpoint is created with kind graph and its definition"}}
		}
		v, err := q.ModelVersionGet(ctx, db.ModelVersionGetParams{ModelID: m.ID, Name: spec.Version, AllTeams: all, TeamIDs: ids})
		if err != nil {
			if errors.Is(err, db.ErrNotFound) {
				return field.Errors{{Field: "version", Message: "no such version of " + spec.Model}}
			}
			return err
		}
		if why, err := registry.Unroutable(ctx, q, p, v); err != nil {
			return err
		} else if why != "" {
			return field.Errors{{Field: "version", Message: why}}
		}
		switch {
		case spec.Runtime == "":
			spec.Runtime = v.Runtime
		case spec.Runtime != v.Runtime:
			return field.Errors{{Field: "runtime", Message: fmt.Sprintf("version %s is served by %s: a version's runtime decides how it is served; leave runtime out", v.Name, v.Runtime)}}
		}
		if profile == "" && v.GPUCount > 0 {
			return field.Errors{{Field: "instance_profile", Message: fmt.Sprintf("is required: version %s needs %d GPU(s); cpu is the default only for versions with gpu_count 0", v.Name, v.GPUCount)}}
		}
		e, err := q.EndpointCreate(ctx, db.EndpointCreateParams{TeamID: m.TeamID, Name: spec.Name, ModelID: m.ID, Runtime: spec.Runtime,
			InstanceProfile: spec.InstanceProfile, MinReplicas: spec.MinReplicas, MaxReplicas: spec.MaxReplicas, Tier: spec.Tier,
			SamplingRate: spec.SamplingRate, RetentionDays: spec.RetentionDays,
			RateLimitRPS: spec.RateLimitRPS, RateLimitBurst: spec.RateLimitBurst, TimeoutMS: spec.TimeoutMS,
			BatchMaxSize: spec.Batching.MaxBatchSize, BatchMaxQueueDelayUS: spec.Batching.MaxQueueDelayUS,
			BatchPreferredSizes: spec.Batching.PreferredBatchSizes, BatchQueueTimeoutMS: spec.Batching.QueueTimeoutMS})
		if err != nil {
			return err
		}
		if err := q.RoutingRuleInsert(ctx, db.RoutingRuleInsertParams{EndpointID: e.ID, VersionID: v.ID, Weight: 100}); err != nil {
			return err
		}
		out = Endpoint{ID: e.ID, TeamID: e.TeamID, Name: e.Name, Team: teamName(ctx, q, p, m.TeamID), Model: m.Name, Task: m.Task, Kind: KindModel,
			Runtime: e.Runtime, InstanceProfile: e.InstanceProfile, MinReplicas: e.MinReplicas, MaxReplicas: e.MaxReplicas, Tier: e.Tier,
			SamplingRate: e.SamplingRate, RetentionDays: e.RetentionDays, Status: e.Status,
			RateLimitRPS: e.RateLimitRPS, RateLimitBurst: e.RateLimitBurst, TimeoutMS: e.TimeoutMS,
			Batching: batchingOf(e.BatchMaxSize, e.BatchMaxQueueDelayUS, e.BatchPreferredSizes, e.BatchQueueTimeoutMS),
			Traffic:  []Weight{{Version: v.Name, Weight: 100}}, CreatedAt: e.CreatedAt, UpdatedAt: e.UpdatedAt}
		return audit.Record(ctx, q, p, audit.Entry{TeamID: &m.TeamID, Action: "endpoint.create", ObjectType: "endpoint", ObjectName: spec.Name, After: out})
	})
	if err != nil {
		return Endpoint{}, fmt.Errorf("create endpoint: %w", err)
	}
	s.changed()
	return out, nil
}

func teamName(ctx context.Context, q *db.Queries, p *auth.Principal, teamID int64) string {
	for _, m := range p.Teams {
		if m.TeamID == teamID {
			return m.Team
		}
	}
	rows, err := q.TeamListByIDs(ctx, []int64{teamID})
	if err != nil || len(rows) == 0 {
		return ""
	}
	return rows[0].Name
}

func fromRow(r db.EndpointGetRow) Endpoint {
	e := Endpoint{ID: r.ID, TeamID: r.TeamID, ModelID: r.ModelID, Name: r.Name, Team: r.TeamName, Model: r.ModelName, Task: r.ModelTask,
		Runtime: r.Runtime, InstanceProfile: r.InstanceProfile, MinReplicas: r.MinReplicas, MaxReplicas: r.MaxReplicas,
		Tier: r.Tier, SamplingRate: r.SamplingRate, RetentionDays: r.RetentionDays, Status: r.Status, PlacementError: r.PlacementError,
		RateLimitRPS: r.RateLimitRPS, RateLimitBurst: r.RateLimitBurst, TimeoutMS: r.TimeoutMS,
		Batching:  batchingOf(r.BatchMaxSize, r.BatchMaxQueueDelayUS, r.BatchPreferredSizes, r.BatchQueueTimeoutMS),
		CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt, Kind: KindModel}
	if e.Task == KindGraph {
		e.Kind = KindGraph
	}
	// The query aggregates the traffic rules and the experiment as JSON it
	// built itself ("null" when there is no experiment).
	if err := json.Unmarshal([]byte(r.Traffic), &e.Traffic); err != nil || e.Traffic == nil {
		e.Traffic = []Weight{}
	}
	if err := json.Unmarshal([]byte(r.Experiment), &e.Experiment); err != nil {
		e.Experiment = nil
	}
	return e
}

func (s *Service) get(ctx context.Context, q *db.Queries, p *auth.Principal, name string) (Endpoint, error) {
	all, ids := p.Scope()
	r, err := q.EndpointGet(ctx, db.EndpointGetParams{Name: name, AllTeams: all, TeamIDs: ids})
	if err != nil {
		return Endpoint{}, fmt.Errorf("endpoint %s: %w", name, err)
	}
	return fromRow(r), nil
}

// getForWrite loads an endpoint the caller may change: one it cannot see is
// not found, one it only reads is forbidden.
func (s *Service) getForWrite(ctx context.Context, q *db.Queries, p *auth.Principal, name string) (Endpoint, error) {
	e, err := s.get(ctx, q, p, name)
	if err != nil {
		return Endpoint{}, err
	}
	if !p.CanWrite(e.TeamID) {
		return Endpoint{}, auth.ErrForbidden
	}
	return e, nil
}

// Get returns an endpoint visible to the caller, with its traffic split and
// its replicas.
func (s *Service) Get(ctx context.Context, p *auth.Principal, name string) (Endpoint, error) {
	q := db.New(s.pool)
	e, err := s.get(ctx, q, p, name)
	if err != nil {
		return Endpoint{}, err
	}
	if e.Replicas, err = s.replicas(ctx, q, p, e, false); err != nil {
		return Endpoint{}, err
	}
	return e, nil
}

// Replicas returns the replicas of an endpoint visible to the caller,
// each with its launch: what its node runs for it.
func (s *Service) Replicas(ctx context.Context, p *auth.Principal, name string) ([]Replica, error) {
	q := db.New(s.pool)
	e, err := s.get(ctx, q, p, name)
	if err != nil {
		return nil, err
	}
	return s.replicas(ctx, q, p, e, true)
}

func (s *Service) replicas(ctx context.Context, q *db.Queries, p *auth.Principal, e Endpoint, launch bool) ([]Replica, error) {
	all, ids := p.Scope()
	rows, err := q.ReplicaListByEndpoint(ctx, db.ReplicaListByEndpointParams{EndpointID: e.ID, AllTeams: all, TeamIDs: ids})
	if err != nil {
		return nil, fmt.Errorf("endpoint %s replicas: %w", e.Name, err)
	}
	out := make([]Replica, len(rows))
	for i, r := range rows {
		out[i] = Replica{Name: r.Name, Version: r.Version, Node: r.Node, State: r.State, Addr: r.Addr, Reason: r.Reason,
			Failures: r.Failures, PlacementNote: r.PlacementNote, GPUType: r.GPUType, Profile: r.Profile, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt, Slots: []string{},
			Metrics: replica.ParseMetrics(r.Metrics)}
		if launch {
			out[i].Launch = replica.ParseLaunch(r.Launch)
		}
		for j := range r.SlotGpus {
			out[i].Slots = append(out[i].Slots, fmt.Sprintf("gpu%d/%d", r.SlotGpus[j], r.SlotSlices[j]))
		}
	}
	return out, nil
}

// List returns the endpoints visible to the caller, after the given id.
func (s *Service) List(ctx context.Context, p *auth.Principal, afterID int64, limit int) ([]Endpoint, error) {
	all, ids := p.Scope()
	rows, err := db.New(s.pool).EndpointList(ctx, db.EndpointListParams{AllTeams: all, TeamIDs: ids, AfterID: afterID, Lim: int32(limit)})
	if err != nil {
		return nil, fmt.Errorf("list endpoints: %w", err)
	}
	out := make([]Endpoint, len(rows))
	for i, r := range rows {
		out[i] = fromRow(db.EndpointGetRow(r))
	}
	return out, nil
}

// Names returns "team/name" of every endpoint that exists among those whose
// usage the caller reads in chargeback: every team's for finance and
// platform admins (their reports name them all), the caller's teams' for
// anyone else. Chargeback marks the rows of the endpoints missing here as
// deleted.
func (s *Service) Names(ctx context.Context, p *auth.Principal) (map[string]bool, error) {
	all, ids := p.Scope()
	all = all || p.Finance()
	rows, err := db.New(s.pool).EndpointNames(ctx, db.EndpointNamesParams{AllTeams: all, TeamIDs: ids})
	if err != nil {
		return nil, fmt.Errorf("endpoint names: %w", err)
	}
	out := make(map[string]bool, len(rows))
	for _, r := range rows {
		out[r.TeamName+"/"+r.Name] = true
	}
	return out, nil
}

// Update changes an endpoint's settings.
func (s *Service) Update(ctx context.Context, p *auth.Principal, name string, set Settings) (Endpoint, error) {
	set.Batching = set.Batching.orDefault()
	all, ids := p.Scope()
	var out Endpoint
	err := db.InTx(ctx, s.pool, func(q *db.Queries) error {
		before, err := s.getForWrite(ctx, q, p, name)
		if err != nil {
			return err
		}
		// An instance profile left out keeps the endpoint's: it is
		// derived from the version on create, so a client need not
		// know it to change the replica bounds.
		if set.InstanceProfile == "" {
			set.InstanceProfile = before.InstanceProfile
		}
		var errs field.Errors
		checkSettings(&errs, set)
		if err := errs.Err(); err != nil {
			return err
		}
		if _, err := q.EndpointUpdate(ctx, db.EndpointUpdateParams{ID: before.ID, InstanceProfile: set.InstanceProfile,
			MinReplicas: set.MinReplicas, MaxReplicas: set.MaxReplicas, Tier: set.Tier, SamplingRate: set.SamplingRate,
			RetentionDays: set.RetentionDays, RateLimitRPS: set.RateLimitRPS, RateLimitBurst: set.RateLimitBurst, TimeoutMS: set.TimeoutMS,
			BatchMaxSize: set.Batching.MaxBatchSize, BatchMaxQueueDelayUS: set.Batching.MaxQueueDelayUS,
			BatchPreferredSizes: set.Batching.PreferredBatchSizes, BatchQueueTimeoutMS: set.Batching.QueueTimeoutMS,
			AllTeams: all, TeamIDs: ids}); err != nil {
			return err
		}
		if out, err = s.get(ctx, q, p, name); err != nil {
			return err
		}
		return audit.Record(ctx, q, p, audit.Entry{TeamID: &before.TeamID, Action: "endpoint.update", ObjectType: "endpoint", ObjectName: name, Before: before, After: out})
	})
	if err != nil {
		return Endpoint{}, fmt.Errorf("update endpoint: %w", err)
	}
	s.changed()
	return out, nil
}

// Delete removes an endpoint and its traffic rules.
func (s *Service) Delete(ctx context.Context, p *auth.Principal, name string) error {
	all, ids := p.Scope()
	err := db.InTx(ctx, s.pool, func(q *db.Queries) error {
		before, err := s.getForWrite(ctx, q, p, name)
		if err != nil {
			return err
		}
		if _, err := q.EndpointDelete(ctx, db.EndpointDeleteParams{ID: before.ID, AllTeams: all, TeamIDs: ids}); err != nil {
			return err
		}
		return audit.Record(ctx, q, p, audit.Entry{TeamID: &before.TeamID, Action: "endpoint.delete", ObjectType: "endpoint", ObjectName: name, Before: before})
	})
	if err != nil {
		return fmt.Errorf("delete endpoint: %w", err)
	}
	s.changed()
	return nil
}

// SetTraffic replaces the endpoint's traffic split. Every version must be a
// registered version of the endpoint's model, named once, and the weights must
// sum to 100. A version of weight 0 may carry a shadow percentage (0 to 100)
// of the endpoint's requests mirrored to it; a served version, and an arm of
// the endpoint's experiment, may not. While a rollout is active it owns the
// split, and SetTraffic refuses.
func (s *Service) SetTraffic(ctx context.Context, p *auth.Principal, name string, weights []Weight) (Endpoint, error) {
	var errs field.Errors
	sum := int32(0)
	seen := map[string]bool{}
	for i, w := range weights {
		if w.Weight < 0 || w.Weight > 100 {
			errs.Add(fmt.Sprintf("weights[%d].weight", i), "must be between 0 and 100")
		}
		if !(w.ShadowPercent >= 0 && w.ShadowPercent <= 100) {
			errs.Add(fmt.Sprintf("weights[%d].shadow_percent", i), "must be between 0 and 100")
		} else if w.ShadowPercent > 0 && w.Weight != 0 {
			errs.Add(fmt.Sprintf("weights[%d].shadow_percent", i), "is only allowed on a version of weight 0 (a shadow never answers callers)")
		}
		if seen[w.Version] {
			errs.Add(fmt.Sprintf("weights[%d].version", i), "is named twice")
		}
		seen[w.Version] = true
		sum += w.Weight
	}
	if len(weights) == 0 {
		errs.Add("weights", "must name at least one version")
	} else if sum != 100 {
		errs.Add("weights", "must sum to 100, not %d", sum)
	}
	if err := errs.Err(); err != nil {
		return Endpoint{}, err
	}
	all, ids := p.Scope()
	var out Endpoint
	err := db.InTx(ctx, s.pool, func(q *db.Queries) error {
		before, err := s.getForWrite(ctx, q, p, name)
		if err != nil {
			return err
		}
		// A rollout sets the weights at every step and rollback; a split
		// set by hand meanwhile would be overwritten, or would leave the
		// rollout's versions out.
		if active, err := q.RolloutActiveByEndpoint(ctx, db.RolloutActiveByEndpointParams{EndpointID: before.ID, AllTeams: all, TeamIDs: ids}); err == nil {
			return field.Errors{{Field: "weights", Message: fmt.Sprintf("rollout %d (to %s) sets this endpoint's traffic until it ends; roll it back or let it finish", active.ID, active.ToVersion)}}
		} else if !errors.Is(err, db.ErrNotFound) {
			return err
		}
		// An experiment arm answers the callers assigned to it; a shadow
		// answers none (the gateway discards its replies).
		if before.Experiment != nil {
			arm := map[string]bool{}
			for _, a := range before.Experiment.Arms {
				arm[a.Version] = true
			}
			var bad field.Errors
			for i, w := range weights {
				if w.ShadowPercent > 0 && arm[w.Version] {
					bad.Add(fmt.Sprintf("weights[%d].shadow_percent", i), "version %s is an arm of experiment %s, which answers callers; end the experiment first", w.Version, before.Experiment.Name)
				}
			}
			if err := bad.Err(); err != nil {
				return err
			}
		}
		serving, err := registry.ServingOn(ctx, q, p, before.ID, before.ModelID)
		if err != nil {
			return err
		}
		if err := q.RoutingRuleDeleteByEndpoint(ctx, db.RoutingRuleDeleteByEndpointParams{EndpointID: before.ID, AllTeams: all, TeamIDs: ids}); err != nil {
			return err
		}
		for i, w := range weights {
			v, err := q.ModelVersionGet(ctx, db.ModelVersionGetParams{ModelID: before.ModelID, Name: w.Version, AllTeams: all, TeamIDs: ids})
			if err != nil {
				if errors.Is(err, db.ErrNotFound) {
					return field.Errors{{Field: fmt.Sprintf("weights[%d].version", i), Message: "no such version of " + before.Model}}
				}
				return err
			}
			why, err := registry.Unroutable(ctx, q, p, v)
			if err != nil {
				return err
			}
			if why = cmp.Or(why, registry.Unfit(v, serving)); why != "" {
				return field.Errors{{Field: fmt.Sprintf("weights[%d].version", i), Message: why}}
			}
			if err := q.RoutingRuleInsert(ctx, db.RoutingRuleInsertParams{EndpointID: before.ID, VersionID: v.ID, Weight: w.Weight,
				ShadowPercent: w.ShadowPercent}); err != nil {
				return err
			}
		}
		if out, err = s.get(ctx, q, p, name); err != nil {
			return err
		}
		return audit.Record(ctx, q, p, audit.Entry{TeamID: &before.TeamID, Action: "endpoint.traffic", ObjectType: "endpoint", ObjectName: name,
			Before: before.Traffic, After: out.Traffic})
	})
	if err != nil {
		return Endpoint{}, fmt.Errorf("set traffic: %w", err)
	}
	s.changed()
	return out, nil
}
