package endpoint

import (
	"context"
	"errors"
	"fmt"

	"modelplane/audit"
	"modelplane/auth"
	"modelplane/db"
	"modelplane/field"
)

// MaxArms bounds the arms of an experiment.
const MaxArms = 10

// Experiment is an endpoint's A/B experiment: the gateway assigns each
// caller that sends X-User-Id to one arm by a stable hash of the
// experiment's name and the user id, so a user keeps its arm on every
// gateway, and a new name reshuffles the users. Callers without a user id
// get the weighted split.
type Experiment struct {
	Name string `json:"name" doc:"Seeds the assignment: a new name reshuffles the users."`
	Arms []Arm  `json:"arms" doc:"Versions of the traffic split (weight 0 is fine) and their shares of the users in percent; the shares sum to 100."`
}

// Arm is one arm of an experiment: a version and its share of the users,
// in percent.
type Arm struct {
	Version string `json:"version"`
	Share   int32  `json:"share"`
}

// SetExperiment starts (or replaces) the endpoint's experiment. The arms
// must name distinct versions that are in the endpoint's traffic split
// (weight 0 is fine: only routed versions get replicas) and are not shadows,
// with shares of 1 to 100 that sum to 100. While a rollout is active it owns
// the endpoint's traffic, and SetExperiment refuses.
func (s *Service) SetExperiment(ctx context.Context, p *auth.Principal, name string, x Experiment) (Endpoint, error) {
	var errs field.Errors
	field.Name(&errs, "name", x.Name)
	if len(x.Arms) < 2 || len(x.Arms) > MaxArms {
		errs.Add("arms", "must name between 2 and %d versions", MaxArms)
	}
	sum := int32(0)
	seen := map[string]bool{}
	for i, a := range x.Arms {
		if a.Share < 1 || a.Share > 100 {
			errs.Add(fmt.Sprintf("arms[%d].share", i), "must be between 1 and 100")
		}
		if seen[a.Version] {
			errs.Add(fmt.Sprintf("arms[%d].version", i), "is named twice")
		}
		seen[a.Version] = true
		sum += a.Share
	}
	if len(x.Arms) > 0 && sum != 100 {
		errs.Add("arms", "shares must sum to 100, not %d", sum)
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
		// A rollout sets the split at every step and deletes what it
		// rolls back; arms set meanwhile would route callers around it.
		if active, err := q.RolloutActiveByEndpoint(ctx, db.RolloutActiveByEndpointParams{EndpointID: before.ID, AllTeams: all, TeamIDs: ids}); err == nil {
			return field.Errors{{Field: "arms", Message: fmt.Sprintf("rollout %d (to %s) sets this endpoint's traffic until it ends; roll it back or let it finish", active.ID, active.ToVersion)}}
		} else if !errors.Is(err, db.ErrNotFound) {
			return err
		}
		routed := map[string]Weight{}
		for _, w := range before.Traffic {
			routed[w.Version] = w
		}
		var bad field.Errors
		for i, a := range x.Arms {
			w, ok := routed[a.Version]
			switch {
			case !ok:
				bad.Add(fmt.Sprintf("arms[%d].version", i), "is not in the endpoint's traffic split; add it there first (weight 0 is fine)")
			case w.ShadowPercent > 0:
				// A shadow's replies are discarded: its users would get none.
				bad.Add(fmt.Sprintf("arms[%d].version", i), "is a shadow (shadow_percent %g); set its shadow_percent to 0 first", w.ShadowPercent)
			}
		}
		if err := bad.Err(); err != nil {
			return err
		}
		if err := q.ExperimentUpsert(ctx, db.ExperimentUpsertParams{EndpointID: before.ID, Name: x.Name}); err != nil {
			return err
		}
		if err := q.ExperimentArmDeleteByEndpoint(ctx, db.ExperimentArmDeleteByEndpointParams{EndpointID: before.ID, AllTeams: all, TeamIDs: ids}); err != nil {
			return err
		}
		for _, a := range x.Arms {
			v, err := q.ModelVersionGet(ctx, db.ModelVersionGetParams{ModelID: before.ModelID, Name: a.Version, AllTeams: all, TeamIDs: ids})
			if err != nil {
				return fmt.Errorf("version %s: %w", a.Version, err)
			}
			if err := q.ExperimentArmInsert(ctx, db.ExperimentArmInsertParams{EndpointID: before.ID, VersionID: v.ID, Share: a.Share}); err != nil {
				return err
			}
		}
		if out, err = s.get(ctx, q, p, name); err != nil {
			return err
		}
		return audit.Record(ctx, q, p, audit.Entry{TeamID: &before.TeamID, Action: "endpoint.experiment", ObjectType: "endpoint", ObjectName: name,
			Before: before.Experiment, After: out.Experiment})
	})
	if err != nil {
		return Endpoint{}, fmt.Errorf("set experiment: %w", err)
	}
	s.changed()
	return out, nil
}

// ErrNoExperiment is returned by EndExperiment for an endpoint without one.
var ErrNoExperiment = fmt.Errorf("endpoint has no experiment: %w", db.ErrNotFound)

// EndExperiment ends the endpoint's experiment: every caller gets the
// weighted split again.
func (s *Service) EndExperiment(ctx context.Context, p *auth.Principal, name string) error {
	all, ids := p.Scope()
	err := db.InTx(ctx, s.pool, func(q *db.Queries) error {
		before, err := s.getForWrite(ctx, q, p, name)
		if err != nil {
			return err
		}
		n, err := q.ExperimentDelete(ctx, db.ExperimentDeleteParams{EndpointID: before.ID, AllTeams: all, TeamIDs: ids})
		if err != nil {
			return err
		}
		if n == 0 {
			return ErrNoExperiment
		}
		return audit.Record(ctx, q, p, audit.Entry{TeamID: &before.TeamID, Action: "endpoint.experiment.end", ObjectType: "endpoint", ObjectName: name,
			Before: before.Experiment})
	})
	if err != nil {
		return fmt.Errorf("end experiment: %w", err)
	}
	s.changed()
	return nil
}
