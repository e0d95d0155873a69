package quota

import (
	"context"
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/coder/quartz"
	"github.com/jackc/pgx/v5/pgxpool"

	"modelplane/audit"
	"modelplane/auth"
	"modelplane/db"
	"modelplane/field"
)

// Quota caps what one team's replicas hold of one resource: a GPU type in
// GPU equivalents (a MIG slice counts as its compute slices out of the
// GPU's seven: 1g.10gb is 1/7), CPUResource in cores or MemoryResource in
// MiB (the host memory replicas are given).
type Quota struct {
	Team      string    `json:"team"`
	Resource  string    `json:"resource" doc:"A GPU type (A100-80GB), cpu or memory."`
	Amount    float64   `json:"amount" doc:"GPU equivalents of that type, CPU cores, or MiB of memory."`
	UpdatedBy string    `json:"updated_by"`
	UpdatedAt time.Time `json:"updated_at"`
}

var resourceRule = regexp.MustCompile(`^[A-Za-z0-9._-]{1,63}$`)

// Service keeps the team quotas.
type Service struct {
	pool  *pgxpool.Pool
	clock quartz.Clock
}

// New returns a Service; clock stamps each quota's update.
func New(pool *pgxpool.Pool, clock quartz.Clock) *Service {
	return &Service{pool: pool, clock: clock}
}

// List lists the quotas of the caller's teams (every team for platform
// roles).
func (s *Service) List(ctx context.Context, p *auth.Principal) ([]Quota, error) {
	all, ids := p.Scope()
	rows, err := db.New(s.pool).TeamQuotaListScoped(ctx, db.TeamQuotaListScopedParams{AllTeams: all, TeamIDs: ids})
	if err != nil {
		return nil, fmt.Errorf("list quotas: %w", err)
	}
	out := make([]Quota, 0, len(rows))
	for _, r := range rows {
		out = append(out, Quota{Team: r.Team, Resource: r.Resource, Amount: r.Amount, UpdatedBy: r.UpdatedBy, UpdatedAt: r.UpdatedAt})
	}
	return out, nil
}

// Set sets team's quota of resource; platform admins only, audited.
// A quota below what the team's minimum replicas hold now is refused
// naming the endpoints that hold them: minimums are what a team is
// promised, so lower an endpoint's min_replicas first.
func (s *Service) Set(ctx context.Context, p *auth.Principal, team, resource string, amount float64) (Quota, error) {
	if !p.PlatformAdmin() {
		return Quota{}, auth.ErrForbidden
	}
	var errs field.Errors
	field.Name(&errs, "team", team)
	switch {
	case !resourceRule.MatchString(resource):
		errs.Add("resource", "must be a GPU type (A100-80GB), cpu or memory")
	case math.IsNaN(amount) || math.IsInf(amount, 0) || amount < 0 || amount > 1e6:
		errs.Add("amount", "must be between 0 and 1,000,000")
	case resource == CPUResource && amount != math.Trunc(amount):
		errs.Add("amount", "must be whole CPU cores")
	case resource == MemoryResource && amount != math.Trunc(amount):
		errs.Add("amount", "must be whole MiB")
	}
	if err := errs.Err(); err != nil {
		return Quota{}, err
	}
	var out Quota
	all, ids := p.Scope()
	err := db.InTx(ctx, s.pool, func(q *db.Queries) error {
		t, err := q.TeamGetByName(ctx, team)
		if err != nil {
			return err
		}
		if err := q.TeamLock(ctx, db.TeamLockParams{ID: t.ID, AllTeams: all, TeamIDs: ids}); err != nil {
			return err
		}
		if err := refuseBelowMinimums(ctx, q, t.ID, resource, amount); err != nil {
			return err
		}
		var before any
		if prev, err := q.TeamQuotaGet(ctx, db.TeamQuotaGetParams{TeamID: t.ID, Resource: resource}); err == nil {
			before = Quota{Team: team, Resource: resource, Amount: prev.Amount, UpdatedBy: prev.UpdatedBy, UpdatedAt: prev.UpdatedAt}
		} else if !errors.Is(err, db.ErrNotFound) {
			return err
		}
		row, err := q.TeamQuotaUpsert(ctx, db.TeamQuotaUpsertParams{TeamID: t.ID, Resource: resource, Amount: amount,
			UpdatedBy: p.Actor(), Now: s.clock.Now()})
		if err != nil {
			return err
		}
		out = Quota{Team: team, Resource: resource, Amount: row.Amount, UpdatedBy: row.UpdatedBy, UpdatedAt: row.UpdatedAt}
		return audit.Record(ctx, q, p, audit.Entry{TeamID: &t.ID, Action: "quota.set", ObjectType: "quota",
			ObjectName: team + "/" + resource, Before: before, After: out})
	})
	if err != nil {
		return Quota{}, fmt.Errorf("set quota: %w", err)
	}
	return out, nil
}

// Delete removes team's quota of resource (no cap); platform admins
// only, audited.
func (s *Service) Delete(ctx context.Context, p *auth.Principal, team, resource string) error {
	if !p.PlatformAdmin() {
		return auth.ErrForbidden
	}
	err := db.InTx(ctx, s.pool, func(q *db.Queries) error {
		t, err := q.TeamGetByName(ctx, team)
		if err != nil {
			return err
		}
		prev, err := q.TeamQuotaGet(ctx, db.TeamQuotaGetParams{TeamID: t.ID, Resource: resource})
		if err != nil {
			return err
		}
		if _, err := q.TeamQuotaDelete(ctx, db.TeamQuotaDeleteParams{TeamID: t.ID, Resource: resource}); err != nil {
			return err
		}
		return audit.Record(ctx, q, p, audit.Entry{TeamID: &t.ID, Action: "quota.delete", ObjectType: "quota",
			ObjectName: team + "/" + resource, Before: Quota{Team: team, Resource: resource, Amount: prev.Amount,
				UpdatedBy: prev.UpdatedBy, UpdatedAt: prev.UpdatedAt}})
	})
	if err != nil {
		return fmt.Errorf("delete quota: %w", err)
	}
	return nil
}

// refuseBelowMinimums fails with a validation error on amount when the
// team's replicas up to each version's min_replicas hold more of resource
// than amount, naming each endpoint and what its minimum holds.
func refuseBelowMinimums(ctx context.Context, q *db.Queries, team int64, resource string, amount float64) error {
	rows, err := q.ReplicaListForQuota(ctx, team)
	if err != nil {
		return err
	}
	type group struct{ endpoint, version int64 }
	byGroup := map[group][]db.ReplicaListForQuotaRow{}
	for _, r := range rows {
		g := group{r.EndpointID, r.VersionID}
		byGroup[g] = append(byGroup[g], r)
	}
	perEndpoint := map[string]int{}
	total := 0
	for _, rs := range byGroup {
		// The replicas a minimum keeps: ready ones first, as scale-down
		// removes the others first.
		slices.SortStableFunc(rs, func(a, b db.ReplicaListForQuotaRow) int {
			ar, br := a.State == "ready", b.State == "ready"
			switch {
			case ar == br:
				return 0
			case ar:
				return -1
			}
			return 1
		})
		for _, r := range rs[:min(len(rs), int(rs[0].MinReplicas))] {
			for _, u := range ReplicaUses(r.GPUType, r.Profile, r.CPUCores, r.MemoryMB, int(r.Slots)) {
				if u.Resource == resource {
					perEndpoint[r.Endpoint] += u.Units
					total += u.Units
				}
			}
		}
	}
	if float64(total) <= Units(resource, amount)+1e-9 {
		return nil
	}
	names := make([]string, 0, len(perEndpoint))
	for n := range perEndpoint {
		names = append(names, n)
	}
	slices.Sort(names)
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = n + " (" + amount2(resource, perEndpoint[n]) + ")"
	}
	unit := Unit(resource)
	var errs field.Errors
	errs.Add("amount", "is below the %s %s %s that the minimum replicas of endpoints %s hold; lower their min_replicas first",
		amount2(resource, total), resource, unit, strings.Join(parts, ", "))
	return errs.Err()
}

func amount2(resource string, units int) string { return Amount(resource, float64(units)) }
