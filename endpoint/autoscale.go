package endpoint

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"modelplane/audit"
	"modelplane/auth"
	"modelplane/autoscale"
	"modelplane/db"
	"modelplane/field"
)

// Autoscaling is an endpoint's autoscaling policy and the count its
// replicas are set to.
type Autoscaling struct {
	Endpoint string              `json:"endpoint"`
	Policy   autoscale.PolicyDoc `json:"policy"`
	// Default is true while the endpoint has no policy of its own: the
	// seed's defaults for its task.
	Default bool `json:"default"`
	// Desired is the autoscaler's count over all the endpoint's versions
	// and DecidedAt when it was decided; nil before its first decision
	// (min_replicas holds).
	Desired   *int32     `json:"desired,omitempty"`
	DecidedAt *time.Time `json:"decided_at,omitempty"`
}

// ScalingDecision is one stored autoscaling decision that changed the count.
type ScalingDecision struct {
	ID     int64     `json:"id"`
	At     time.Time `json:"at"`
	Before int32     `json:"before"`
	After  int32     `json:"after"`
	// Signal is the winning signal (empty when none decided, as for a
	// wake or scale to zero); Reason says why for people.
	Signal string `json:"signal,omitempty"`
	Reason string `json:"reason"`
	// Inputs is the whole autoscale.Decision: every signal's reading,
	// ready and starting replicas, panic and freeze.
	Inputs autoscale.Decision `json:"inputs"`
}

// Autoscaling returns the endpoint's policy (its own, or the defaults of its
// task) and its current count.
func (s *Service) Autoscaling(ctx context.Context, p *auth.Principal, name string, grace time.Duration) (Autoscaling, error) {
	q := db.New(s.pool)
	e, err := s.get(ctx, q, p, name)
	if err != nil {
		return Autoscaling{}, err
	}
	return s.autoscaling(ctx, q, e, grace)
}

func (s *Service) autoscaling(ctx context.Context, q *db.Queries, e Endpoint, grace time.Duration) (Autoscaling, error) {
	gpu, err := q.EndpointRoutesGPUVersion(ctx, e.ID)
	if err != nil {
		return Autoscaling{}, fmt.Errorf("endpoint %s autoscaling: %w", e.Name, err)
	}
	raw, err := q.EndpointAutoscalePolicy(ctx, e.ID)
	if err != nil {
		return Autoscaling{}, fmt.Errorf("endpoint %s autoscaling: %w", e.Name, err)
	}
	out := Autoscaling{Endpoint: e.Name, Default: len(raw) == 0,
		Policy: autoscale.DocOf(autoscale.StoredPolicy(raw, e.Task, gpu, e.MinReplicas, e.MaxReplicas, grace))}
	c, err := q.AutoscaleCountGet(ctx, e.ID)
	switch {
	case err == nil:
		out.Desired, out.DecidedAt = &c.Desired, &c.DecidedAt
	case !errors.Is(err, db.ErrNotFound):
		return Autoscaling{}, fmt.Errorf("endpoint %s autoscaling: %w", e.Name, err)
	}
	return out, nil
}

// SetAutoscaling replaces the endpoint's policy. Its bounds are the
// endpoint's min_replicas and max_replicas (one source of truth: this sets
// them). A policy autoscale.Policy.Validate refuses for the endpoint's task
// is a validation error naming the field (signals[0].target, ...).
func (s *Service) SetAutoscaling(ctx context.Context, p *auth.Principal, name string, doc autoscale.PolicyDoc, grace time.Duration) (Autoscaling, error) {
	var out Autoscaling
	err := db.InTx(ctx, s.pool, func(q *db.Queries) error {
		before, err := s.getForWrite(ctx, q, p, name)
		if err != nil {
			return err
		}
		gpu, err := q.EndpointRoutesGPUVersion(ctx, before.ID)
		if err != nil {
			return err
		}
		pol := doc.Policy()
		var errs field.Errors
		if doc.MinReplicas > 1000 {
			errs.Add("min_replicas", "must be between 0 and 1000, got %d", doc.MinReplicas)
		}
		if doc.MaxReplicas > 1000 {
			errs.Add("max_replicas", "must be between 1 and 1000, got %d", doc.MaxReplicas)
		}
		if err := pol.Validate(autoscale.Task(before.Task), gpu); err != nil {
			var verr field.Errors
			if !errors.As(err, &verr) {
				return err
			}
			errs = append(errs, verr...)
		}
		if err := errs.Err(); err != nil {
			return err
		}
		old, err := s.autoscaling(ctx, q, before, grace)
		if err != nil {
			return err
		}
		all, ids := p.Scope()
		if err := q.EndpointAutoscaleSet(ctx, db.EndpointAutoscaleSetParams{ID: before.ID, Policy: autoscale.StoreJSON(pol),
			MinReplicas: doc.MinReplicas, MaxReplicas: doc.MaxReplicas, AllTeams: all, TeamIDs: ids}); err != nil {
			return err
		}
		e, err := s.get(ctx, q, p, name)
		if err != nil {
			return err
		}
		if out, err = s.autoscaling(ctx, q, e, grace); err != nil {
			return err
		}
		return audit.Record(ctx, q, p, audit.Entry{TeamID: &before.TeamID, Action: "endpoint.autoscaling", ObjectType: "endpoint",
			ObjectName: name, Before: old.Policy, After: out.Policy})
	})
	if err != nil {
		return Autoscaling{}, fmt.Errorf("set autoscaling: %w", err)
	}
	s.changed()
	return out, nil
}

// AutoscaleDecisions returns the endpoint's stored decisions, newest
// first, before the decision of id beforeID (0: from the newest).
func (s *Service) AutoscaleDecisions(ctx context.Context, p *auth.Principal, name string, beforeID int64, limit int) ([]ScalingDecision, error) {
	q := db.New(s.pool)
	e, err := s.get(ctx, q, p, name)
	if err != nil {
		return nil, err
	}
	all, ids := p.Scope()
	rows, err := q.AutoscaleDecisionList(ctx, db.AutoscaleDecisionListParams{EndpointID: e.ID, BeforeID: beforeID,
		AllTeams: all, TeamIDs: ids, Lim: int32(limit)})
	if err != nil {
		return nil, fmt.Errorf("endpoint %s decisions: %w", name, err)
	}
	out := make([]ScalingDecision, len(rows))
	for i, r := range rows {
		out[i] = ScalingDecision{ID: r.ID, At: r.At, Before: r.Before, After: r.After, Signal: r.Signal, Reason: r.Reason}
		_ = json.Unmarshal(r.Decision, &out[i].Inputs)
	}
	return out, nil
}
