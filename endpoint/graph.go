package endpoint

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"modelplane/audit"
	"modelplane/auth"
	"modelplane/db"
	"modelplane/field"
	"modelplane/graph"
)

// KindModel and KindGraph are Endpoint.Kind: an endpoint serves versions
// of a model on replicas, or runs versions of a graph in the gateways.
const (
	KindModel = "model"
	KindGraph = "graph"
)

// GraphSpec creates a graph endpoint: the endpoint, its graph model (of the
// same name) and its first version, at 100 percent.
type GraphSpec struct {
	Name string
	// Team owns the graph; may be empty when the caller has one team.
	Team        string
	Description string
	Version     string
	Definition  graph.Definition
	// Settings: the gateway settings (rate limit, timeout, sampling) and
	// retention apply; replicas, profile and batching do not.
	Settings
}

// GraphVersion is one version of a graph endpoint.
type GraphVersion struct {
	Name string `json:"name"`
	// Weight is the version's share of traffic in percent, -1 when it is
	// not routed.
	Weight     int32            `json:"weight"`
	Parent     string           `json:"parent_version,omitempty"`
	Definition graph.Definition `json:"graph"`
	CreatedBy  string           `json:"created_by"`
	CreatedAt  time.Time        `json:"created_at"`
}

// MayCall reports whether team may call endpoint e through the gateway: the
// one place the control plane answers "may team T call endpoint E", used by
// graph validation at save: the owning team, and teams the owners granted
// call access (package grant).
func MayCall(ctx context.Context, q *db.Queries, team int64, e db.EndpointGetAsTargetRow) (bool, error) {
	if e.TeamID == team {
		return true, nil
	}
	ok, err := q.GrantExists(ctx, db.GrantExistsParams{EndpointID: e.ID, TeamID: team})
	if err != nil {
		return false, fmt.Errorf("grants of %s: %w", e.Name, err)
	}
	return ok, nil
}

// lookup is graph validation's view of targets for a graph of team.
func lookup(ctx context.Context, q *db.Queries, team int64) graph.Lookup {
	return func(name string) (graph.Target, error) {
		e, err := q.EndpointGetAsTarget(ctx, name)
		if errors.Is(err, db.ErrNotFound) {
			return graph.Target{}, nil
		}
		if err != nil {
			return graph.Target{}, fmt.Errorf("graph target %s: %w", name, err)
		}
		ok, err := MayCall(ctx, q, team, e)
		if err != nil || !ok {
			return graph.Target{}, err
		}
		t := graph.Target{Exists: true, Task: e.Task, InputSchema: json.RawMessage(e.InputSchema), OutputSchema: json.RawMessage(e.OutputSchema)}
		var defs []graph.Definition
		if err := json.Unmarshal(e.Graphs, &defs); err != nil {
			return graph.Target{}, fmt.Errorf("graph target %s: %w", name, err)
		}
		for _, d := range defs {
			t.Calls = append(t.Calls, d.Endpoints()...)
		}
		return t, nil
	}
}

// graphErr turns a refused definition into the field error the API
// answers 400 with, naming the node.
func graphErr(err error) error {
	var ne *graph.NodeError
	if errors.As(err, &ne) {
		f := "graph"
		if ne.Node != "" {
			f = "graph.nodes[" + ne.Node + "]"
		}
		return field.Errors{{Field: f, Message: ne.Error()}}
	}
	return err
}

// CreateGraph creates a graph endpoint after validating its definition as
// its team would call its targets.
func (s *Service) CreateGraph(ctx context.Context, p *auth.Principal, spec GraphSpec) (Endpoint, error) {
	var errs field.Errors
	field.Name(&errs, "name", spec.Name)
	spec.Version = cmp.Or(spec.Version, "v1")
	field.VersionName(&errs, "version", spec.Version)
	if len(spec.Description) > 2000 {
		errs.Add("description", "must be at most 2000 characters")
	}
	spec.InstanceProfile, spec.MinReplicas, spec.MaxReplicas = ProfileCPU, 0, 1
	spec.Tier = cmp.Or(spec.Tier, "standard")
	spec.RetentionDays = cmp.Or(spec.RetentionDays, 30)
	spec.Batching = spec.Batching.orDefault()
	checkSettings(&errs, spec.Settings)
	m, ok := p.Membership(spec.Team)
	if spec.Team == "" {
		if len(p.Teams) == 1 {
			m, ok = p.Teams[0], true
		} else {
			errs.Add("team", "is required")
		}
	}
	if err := errs.Err(); err != nil {
		return Endpoint{}, err
	}
	def, err := json.Marshal(spec.Definition)
	if err != nil {
		return Endpoint{}, err
	}
	var out Endpoint
	err = db.InTx(ctx, s.pool, func(q *db.Queries) error {
		if !ok && p.PlatformAdmin() {
			t, err := q.TeamGetByName(ctx, spec.Team)
			if err != nil {
				return fmt.Errorf("team %s: %w", spec.Team, err)
			}
			m, ok = auth.Membership{TeamID: t.ID, Team: t.Name, Role: auth.RoleAdmin}, true
		}
		if !ok {
			return fmt.Errorf("team %s: %w", spec.Team, db.ErrNotFound)
		}
		if !p.CanWrite(m.TeamID) {
			return auth.ErrForbidden
		}
		if err := graph.Validate(&spec.Definition, spec.Name, lookup(ctx, q, m.TeamID)); err != nil {
			return graphErr(err)
		}
		model, err := q.ModelCreate(ctx, db.ModelCreateParams{TeamID: m.TeamID, Name: spec.Name, Task: graph.Task,
			Description: spec.Description, InputSchema: []byte("{}"), OutputSchema: []byte("{}"), FeatureNames: []string{},
			CreatedBy: p.Actor(), CreatedByUserID: p.ActorUserID(), CreatedByKeyID: p.ActorKeyID()})
		if err != nil {
			return err
		}
		v, err := q.ModelVersionCreateGraph(ctx, db.ModelVersionCreateGraphParams{ModelID: model.ID, TeamID: m.TeamID, Name: spec.Version,
			Graph: def, CreatedBy: p.Actor(), CreatedByUserID: p.ActorUserID(), CreatedByKeyID: p.ActorKeyID()})
		if err != nil {
			return err
		}
		e, err := q.EndpointCreate(ctx, db.EndpointCreateParams{TeamID: m.TeamID, Name: spec.Name, ModelID: model.ID, Runtime: graph.Runtime,
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
		// Ready once saved: it runs in the gateways, and placement, which
		// sets the other endpoints' status, never sees it.
		e.Status = "ready"
		if err := q.EndpointSetPlacement(ctx, db.EndpointSetPlacementParams{IDs: []int64{e.ID}, Statuses: []string{e.Status}, PlacementErrors: []string{""}}); err != nil {
			return err
		}
		out = Endpoint{ID: e.ID, TeamID: e.TeamID, ModelID: model.ID, Name: e.Name, Team: m.Team, Model: model.Name, Task: graph.Task, Kind: KindGraph,
			Runtime: e.Runtime, InstanceProfile: e.InstanceProfile, MinReplicas: e.MinReplicas, MaxReplicas: e.MaxReplicas, Tier: e.Tier,
			SamplingRate: e.SamplingRate, RetentionDays: e.RetentionDays, Status: e.Status,
			RateLimitRPS: e.RateLimitRPS, RateLimitBurst: e.RateLimitBurst, TimeoutMS: e.TimeoutMS,
			Batching: batchingOf(e.BatchMaxSize, e.BatchMaxQueueDelayUS, e.BatchPreferredSizes, e.BatchQueueTimeoutMS),
			Traffic:  []Weight{{Version: v.Name, Weight: 100}}, CreatedAt: e.CreatedAt, UpdatedAt: e.UpdatedAt}
		return audit.Record(ctx, q, p, audit.Entry{TeamID: &m.TeamID, Action: "endpoint.create", ObjectType: "endpoint", ObjectName: spec.Name,
			After: struct {
				Endpoint
				Graph graph.Definition `json:"graph"`
			}{out, spec.Definition}})
	})
	if err != nil {
		return Endpoint{}, fmt.Errorf("create graph endpoint: %w", err)
	}
	s.changed()
	return out, nil
}

// AddGraphVersion saves a new version of a graph endpoint, validated as
// its team would call its targets. It takes no traffic: a rollout moves it
// in, as it moves a model version.
func (s *Service) AddGraphVersion(ctx context.Context, p *auth.Principal, name, version string, d graph.Definition) (GraphVersion, error) {
	var errs field.Errors
	field.VersionName(&errs, "version", version)
	if err := errs.Err(); err != nil {
		return GraphVersion{}, err
	}
	def, err := json.Marshal(d)
	if err != nil {
		return GraphVersion{}, err
	}
	var out GraphVersion
	err = db.InTx(ctx, s.pool, func(q *db.Queries) error {
		e, err := s.getForWrite(ctx, q, p, name)
		if err != nil {
			return err
		}
		if e.Task != graph.Task {
			return field.Errors{{Field: "endpoint", Message: "is not a graph endpoint"}}
		}
		if err := graph.Validate(&d, e.Name, lookup(ctx, q, e.TeamID)); err != nil {
			return graphErr(err)
		}
		parent := ""
		for _, w := range e.Traffic {
			if w.Weight > 0 {
				parent = w.Version
			}
		}
		v, err := q.ModelVersionCreateGraph(ctx, db.ModelVersionCreateGraphParams{ModelID: e.ModelID, TeamID: e.TeamID, Name: version,
			ParentVersion: parent, Graph: def, CreatedBy: p.Actor(), CreatedByUserID: p.ActorUserID(), CreatedByKeyID: p.ActorKeyID()})
		if err != nil {
			return err
		}
		out = GraphVersion{Name: v.Name, Weight: -1, Parent: parent, Definition: d, CreatedBy: p.Actor(), CreatedAt: v.CreatedAt}
		return audit.Record(ctx, q, p, audit.Entry{TeamID: &e.TeamID, Action: "graph.version.create", ObjectType: "endpoint", ObjectName: e.Name, After: out})
	})
	if err != nil {
		return GraphVersion{}, fmt.Errorf("add graph version: %w", err)
	}
	return out, nil
}

// GraphVersions lists a graph endpoint's versions with their definitions;
// none for a model endpoint.
func (s *Service) GraphVersions(ctx context.Context, p *auth.Principal, name string) ([]GraphVersion, error) {
	q := db.New(s.pool)
	e, err := s.get(ctx, q, p, name)
	if err != nil {
		return nil, err
	}
	if e.Task != graph.Task {
		return []GraphVersion{}, nil // a model endpoint has none
	}
	all, ids := p.Scope()
	rows, err := q.ModelVersionListGraphs(ctx, db.ModelVersionListGraphsParams{EndpointID: e.ID, ModelID: e.ModelID, AllTeams: all, TeamIDs: ids})
	if err != nil {
		return nil, fmt.Errorf("graph versions of %s: %w", name, err)
	}
	out := make([]GraphVersion, 0, len(rows))
	for _, r := range rows {
		v := GraphVersion{Name: r.Name, Weight: r.Weight, Parent: r.ParentVersion, CreatedBy: r.CreatedBy, CreatedAt: r.CreatedAt}
		if err := json.Unmarshal(r.Graph, &v.Definition); err != nil {
			return nil, fmt.Errorf("graph version %s: %w", r.Name, err)
		}
		out = append(out, v)
	}
	return out, nil
}

// GraphsUsing returns the graph endpoints of team whose routed versions
// call the endpoint of id endpointID: the graphs a revocation of team's
// access to it breaks (what package grant's Dependents asks). Names only,
// for the revoking owners to see.
func (s *Service) GraphsUsing(ctx context.Context, endpointID int64, team string) ([]string, error) {
	names, err := db.New(s.pool).EndpointGraphsCalling(ctx, db.EndpointGraphsCallingParams{Team: team, EndpointID: endpointID})
	if err != nil {
		return nil, fmt.Errorf("graphs of %s using endpoint %d: %w", team, endpointID, err)
	}
	return names, nil
}
