package grant

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"github.com/coder/quartz"
	"github.com/jackc/pgx/v5/pgxpool"

	"modelplane/audit"
	"modelplane/auth"
	"modelplane/db"
	"modelplane/field"
	"modelplane/route"
)

// Grant is one team's call access to an endpoint.
type Grant struct {
	Endpoint string `json:"endpoint"`
	// Team is the consumer: the team whose keys and members may call.
	Team string `json:"team"`
	// RateLimitRPS bounds the team's requests per second at each gateway,
	// in bursts of RateLimitBurst (the rate rounded up when 0); 0 is
	// unlimited.
	RateLimitRPS   float64 `json:"rate_limit_rps" minimum:"0" maximum:"1000000"`
	RateLimitBurst int32   `json:"rate_limit_burst" minimum:"0" maximum:"1000000"`
	// DailyQuota bounds the team's requests per UTC day across gateways,
	// within 5 % (docs/sharing.md); 0 is unlimited.
	DailyQuota int64 `json:"daily_quota" minimum:"0"`
	// Sampling says whether the team's requests may be sampled into
	// prediction samples at the endpoint's sampling rate.
	Sampling  bool      `json:"sampling"`
	GrantedBy string    `json:"granted_by"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// Limits are what a grant sets.
type Limits struct {
	RateLimitRPS   float64
	RateLimitBurst int32
	DailyQuota     int64
	Sampling       bool
}

// Shared is a grant seen by its consumer: the endpoint, its owners and the
// model's schemas, what a caller needs to call it.
type Shared struct {
	Grant
	Owner        string          `json:"owner"`
	Model        string          `json:"model"`
	Task         string          `json:"task"`
	InputSchema  json.RawMessage `json:"input_schema"`
	OutputSchema json.RawMessage `json:"output_schema"`
	FeatureNames []string        `json:"feature_names"`
}

// Revocation is what Revoke answers: the grant revoked and the inference
// graphs that called the endpoint through it, which now fail.
type Revocation struct {
	Revoked      Grant    `json:"revoked"`
	BrokenGraphs []string `json:"broken_graphs"`
}

// Dependents finds the inference graphs of team that call the endpoint of
// id endpointID: the graphs a revocation of team's grant breaks. The
// graph package implements it; the consumer declares it here.
type Dependents interface {
	GraphsUsing(ctx context.Context, endpointID int64, team string) ([]string, error)
}

// NoGraphs is the Dependents of a platform without inference graphs: no
// graph uses any endpoint.
type NoGraphs struct{}

// GraphsUsing returns none.
func (NoGraphs) GraphsUsing(context.Context, int64, string) ([]string, error) { return nil, nil }

// ErrOwnTeam is returned for a grant to the endpoint's own team, which
// calls it anyway.
var ErrOwnTeam = errors.New("the endpoint's own team needs no grant")

// Service manages grants.
type Service struct {
	pool      *pgxpool.Pool
	clock     quartz.Clock
	published func()
	deps      atomic.Pointer[Dependents]
}

// New returns a Service; clock picks the month of the budgets a routing
// entry carries (quartz.NewReal() when nil); published, when set, is
// called after a change commits (the outbox relay's Wake), so the routing
// entry leaves at once rather than at the relay's next poll.
func New(pool *pgxpool.Pool, clock quartz.Clock, published func()) *Service {
	if clock == nil {
		clock = quartz.NewReal()
	}
	if published == nil {
		published = func() {}
	}
	s := &Service{pool: pool, clock: clock, published: published}
	var d Dependents = NoGraphs{}
	s.deps.Store(&d)
	return s
}

// SetDependents sets what Revoke asks which graphs use an endpoint; nil
// restores NoGraphs.
func (s *Service) SetDependents(d Dependents) {
	if d == nil {
		d = NoGraphs{}
	}
	s.deps.Store(&d)
}

// endpointForWrite loads an endpoint the caller may share: one it cannot
// see is not found, one it only reads is forbidden.
func endpointForWrite(ctx context.Context, q *db.Queries, p *auth.Principal, name string) (db.EndpointGetRow, error) {
	all, ids := p.Scope()
	e, err := q.EndpointGet(ctx, db.EndpointGetParams{Name: name, AllTeams: all, TeamIDs: ids})
	if err != nil {
		return db.EndpointGetRow{}, fmt.Errorf("endpoint %s: %w", name, err)
	}
	if !p.CanWrite(e.TeamID) {
		return db.EndpointGetRow{}, auth.ErrForbidden
	}
	return e, nil
}

func check(l Limits) error {
	var errs field.Errors
	if !(l.RateLimitRPS >= 0 && l.RateLimitRPS <= 1_000_000) || math.IsInf(l.RateLimitRPS, 0) {
		errs.Add("rate_limit_rps", "must be between 0 (unlimited) and 1000000")
	}
	if l.RateLimitBurst < 0 || l.RateLimitBurst > 1_000_000 {
		errs.Add("rate_limit_burst", "must be between 0 (the rate, rounded up) and 1000000")
	}
	if l.DailyQuota < 0 || l.DailyQuota > 1_000_000_000_000 {
		errs.Add("daily_quota", "must be between 0 (unlimited) and 1000000000000")
	}
	return errs.Err()
}

// Set grants team call access to endpoint, or changes the limits of its
// grant, with the audit row and the endpoint's routing entry in the same
// transaction.
func (s *Service) Set(ctx context.Context, p *auth.Principal, endpoint, team string, l Limits) (Grant, error) {
	if err := check(l); err != nil {
		return Grant{}, err
	}
	var out Grant
	err := db.InTx(ctx, s.pool, func(q *db.Queries) error {
		e, err := endpointForWrite(ctx, q, p, endpoint)
		if err != nil {
			return err
		}
		if team == e.TeamName {
			var errs field.Errors
			errs.Add("team", "%s", ErrOwnTeam.Error())
			return errs
		}
		teamID, err := q.TeamIDByName(ctx, team)
		if errors.Is(err, db.ErrNotFound) {
			var errs field.Errors
			errs.Add("team", "no team %q", team)
			return errs
		}
		if err != nil {
			return err
		}
		before, had, err := find(ctx, q, p, e.ID, team)
		if err != nil {
			return err
		}
		if err := route.Lock(ctx, q, e.ID); err != nil {
			return err
		}
		r, err := q.GrantUpsert(ctx, db.GrantUpsertParams{EndpointID: e.ID, TeamID: teamID, RateLimitRPS: l.RateLimitRPS,
			RateLimitBurst: l.RateLimitBurst, DailyQuota: l.DailyQuota, Sampling: l.Sampling, GrantedBy: p.Actor()})
		if err != nil {
			return err
		}
		out = Grant{Endpoint: endpoint, Team: team, RateLimitRPS: r.RateLimitRPS, RateLimitBurst: r.RateLimitBurst,
			DailyQuota: r.DailyQuota, Sampling: r.Sampling, GrantedBy: r.GrantedBy, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt}
		if _, err := route.Write(ctx, q, e.ID, s.clock.Now()); err != nil {
			return err
		}
		entry := audit.Entry{TeamID: &e.TeamID, Action: "grant.create", ObjectType: "endpoint_grant", ObjectName: endpoint + "/" + team, After: out}
		if had {
			entry.Action, entry.Before = "grant.update", before
		}
		return audit.Record(ctx, q, p, entry)
	})
	if err != nil {
		return Grant{}, fmt.Errorf("grant %s to %s: %w", endpoint, team, err)
	}
	s.published()
	return out, nil
}

// Revoke ends team's call access to endpoint, with the audit row and the
// routing entry in the same transaction; gateways answer the team's
// callers 404 once the entry reaches them. The answer names the team's
// inference graphs that called the endpoint.
func (s *Service) Revoke(ctx context.Context, p *auth.Principal, endpoint, team string) (Revocation, error) {
	var out Revocation
	err := db.InTx(ctx, s.pool, func(q *db.Queries) error {
		e, err := endpointForWrite(ctx, q, p, endpoint)
		if err != nil {
			return err
		}
		before, had, err := find(ctx, q, p, e.ID, team)
		if err != nil {
			return err
		}
		if !had {
			return fmt.Errorf("grant to %s: %w", team, db.ErrNotFound)
		}
		teamID, err := q.TeamIDByName(ctx, team)
		if err != nil {
			return err
		}
		if err := route.Lock(ctx, q, e.ID); err != nil {
			return err
		}
		all, ids := p.Scope()
		if _, err := q.GrantDelete(ctx, db.GrantDeleteParams{EndpointID: e.ID, TeamID: teamID, AllTeams: all, TeamIDs: ids}); err != nil {
			return err
		}
		if _, err := route.Write(ctx, q, e.ID, s.clock.Now()); err != nil {
			return err
		}
		graphs, err := (*s.deps.Load()).GraphsUsing(ctx, e.ID, team)
		if err != nil {
			return fmt.Errorf("graphs using %s: %w", endpoint, err)
		}
		out = Revocation{Revoked: before, BrokenGraphs: graphs}
		if out.BrokenGraphs == nil {
			out.BrokenGraphs = []string{}
		}
		return audit.Record(ctx, q, p, audit.Entry{TeamID: &e.TeamID, Action: "grant.revoke", ObjectType: "endpoint_grant",
			ObjectName: endpoint + "/" + team, Before: out})
	})
	if err != nil {
		return Revocation{}, fmt.Errorf("revoke %s from %s: %w", endpoint, team, err)
	}
	s.published()
	return out, nil
}

// find returns team's grant of the endpoint of id endpointID, which the
// caller's teams own.
func find(ctx context.Context, q *db.Queries, p *auth.Principal, endpointID int64, team string) (Grant, bool, error) {
	gs, err := list(ctx, q, p, endpointID, "")
	if err != nil {
		return Grant{}, false, err
	}
	for _, g := range gs {
		if g.Team == team {
			return g, true, nil
		}
	}
	return Grant{}, false, nil
}

func list(ctx context.Context, q *db.Queries, p *auth.Principal, endpointID int64, endpoint string) ([]Grant, error) {
	all, ids := p.Scope()
	rows, err := q.GrantListByEndpoint(ctx, db.GrantListByEndpointParams{EndpointID: endpointID, AllTeams: all, TeamIDs: ids})
	if err != nil {
		return nil, err
	}
	out := make([]Grant, len(rows))
	for i, r := range rows {
		out[i] = Grant{Endpoint: endpoint, Team: r.Team, RateLimitRPS: r.RateLimitRPS, RateLimitBurst: r.RateLimitBurst,
			DailyQuota: r.DailyQuota, Sampling: r.Sampling, GrantedBy: r.GrantedBy, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt}
	}
	return out, nil
}

// List returns the grants of an endpoint the caller's teams own (any
// member may read them), by team name.
func (s *Service) List(ctx context.Context, p *auth.Principal, endpoint string) ([]Grant, error) {
	q := db.New(s.pool)
	all, ids := p.Scope()
	e, err := q.EndpointGet(ctx, db.EndpointGetParams{Name: endpoint, AllTeams: all, TeamIDs: ids})
	if err != nil {
		return nil, fmt.Errorf("grants of %s: endpoint: %w", endpoint, err)
	}
	out, err := list(ctx, q, p, e.ID, endpoint)
	if err != nil {
		return nil, fmt.Errorf("grants of %s: %w", endpoint, err)
	}
	return out, nil
}

// SharedWith returns what other teams shared with the caller's teams, by
// endpoint: each grant with the endpoint's owners and the model's schemas.
// A platform admin sees what is shared with the teams they are a member
// of, like anyone else: it is a consumer's list, not an audit.
func (s *Service) SharedWith(ctx context.Context, p *auth.Principal) ([]Shared, error) {
	ids := make([]int64, 0, len(p.Teams))
	for _, m := range p.Teams {
		ids = append(ids, m.TeamID)
	}
	rows, err := db.New(s.pool).GrantListShared(ctx, ids)
	if err != nil {
		return nil, fmt.Errorf("shared with me: %w", err)
	}
	out := make([]Shared, len(rows))
	for i, r := range rows {
		out[i] = Shared{Grant: Grant{Endpoint: r.Endpoint, Team: r.Team, RateLimitRPS: r.RateLimitRPS, RateLimitBurst: r.RateLimitBurst,
			DailyQuota: r.DailyQuota, Sampling: r.Sampling, GrantedBy: r.GrantedBy, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt},
			Owner: r.Owner, Model: r.Model, Task: r.Task, InputSchema: json.RawMessage(r.InputSchema),
			OutputSchema: json.RawMessage(r.OutputSchema), FeatureNames: r.FeatureNames}
		if out[i].FeatureNames == nil {
			out[i].FeatureNames = []string{}
		}
	}
	return out, nil
}
