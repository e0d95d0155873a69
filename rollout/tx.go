package rollout

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"modelplane/audit"
	"modelplane/auth"
	"modelplane/busapi"
	"modelplane/db"
	"modelplane/judge"
	"modelplane/outbox"
	"modelplane/route"
)

// tx is one change to one rollout, inside a transaction that holds the
// rollout's row lock: whoever changes a rollout (a person through Service,
// the controller) goes through it, so two changes never interleave and a
// promotion cannot happen twice.
type tx struct {
	q   *db.Queries
	now time.Time
	// p locked the rollout with its scope, so that scope covers every
	// query the change makes on the rollout's endpoint and team.
	p *auth.Principal
	r Rollout
	// routes is set once routing rules changed: finish writes the routing
	// entry in the same transaction.
	routes bool
}

// lockTx locks rollout id, as p may see it (another team's answers not
// found), for one change in q's transaction.
func lockTx(ctx context.Context, q *db.Queries, id int64, now time.Time, p *auth.Principal) (*tx, error) {
	all, ids := p.Scope()
	row, err := q.RolloutGetForUpdate(ctx, db.RolloutGetForUpdateParams{ID: id, AllTeams: all, TeamIDs: ids})
	if err != nil {
		return nil, fmt.Errorf("rollout %d: %w", id, err)
	}
	return &tx{q: q, now: now, p: p, r: fromRow(db.RolloutGetRow(row))}, nil
}

// persist writes the rollout row as t.r holds it.
func (t *tx) persist(ctx context.Context) error {
	all, ids := t.p.Scope()
	r := t.r
	return t.q.RolloutUpdate(ctx, db.RolloutUpdateParams{ID: r.ID, StepIndex: int32(r.StepIndex), State: r.State, Paused: r.Paused,
		Reason: r.Reason, StepStartedAt: r.StepStartedAt, BakeDeadline: r.BakeDeadline, LastEvaluatedAt: r.LastEvaluatedAt,
		CleanupAt: r.CleanupAt, Cleaned: r.Cleaned, FinishedAt: r.FinishedAt, Generation: r.Generation, Now: t.now,
		AllTeams: all, TeamIDs: ids})
}

// auditView is what the audit log keeps of a rollout's state.
type auditView struct {
	ID        int64  `json:"id"`
	Endpoint  string `json:"endpoint"`
	From      string `json:"from_version"`
	To        string `json:"to_version"`
	Strategy  string `json:"strategy"`
	StepIndex int    `json:"step_index"`
	Percent   int    `json:"percent"`
	State     string `json:"state"`
	Paused    bool   `json:"paused"`
}

func (t *tx) view() auditView {
	pct := 0
	if t.r.StepIndex < len(t.r.Steps) {
		pct = t.r.Steps[t.r.StepIndex].Percent
	}
	return auditView{ID: t.r.ID, Endpoint: t.r.Endpoint, From: t.r.FromVersion, To: t.r.ToVersion, Strategy: t.r.Strategy,
		StepIndex: t.r.StepIndex, Percent: pct, State: t.r.State, Paused: t.r.Paused}
}

// save records a state change: the row with the next generation, a state
// event, the audit record and the mp.events message, all in t's
// transaction. action names it ("start", "advance", "rollback", …).
func (t *tx) save(ctx context.Context, action, msg string) error {
	before := t.view()
	t.r.Generation++
	t.r.Reason = msg
	if err := t.persist(ctx); err != nil {
		return err
	}
	if err := t.event(ctx, "state", action, msg, nil, nil); err != nil {
		return err
	}
	return t.audit(ctx, action, before, t.view())
}

// decisionView is what an approval or a rejection records: the rollout as
// it stood, and the decision on its step to 100 percent.
type decisionView struct {
	auditView
	Decision string `json:"decision"`
	Comment  string `json:"comment,omitempty"`
}

// audit records action ("rollout."+action) on the rollout in t's
// transaction.
func (t *tx) audit(ctx context.Context, action string, before, after any) error {
	return audit.Record(ctx, t.q, t.p, audit.Entry{TeamID: &t.r.TeamID, Action: "rollout." + action, ObjectType: "rollout",
		ObjectName: fmt.Sprintf("%s#%d", t.r.Endpoint, t.r.ID), Before: before, After: after})
}

// event stores one timeline entry and tells the team's live pages.
func (t *tx) event(ctx context.Context, kind, decision, msg string, v *judge.Verdict, w *Windows) error {
	var vj, wj []byte
	if v != nil {
		vj, _ = json.Marshal(v)
	}
	if w != nil {
		wj, _ = json.Marshal(w)
	}
	if err := t.q.RolloutEventInsert(ctx, db.RolloutEventInsertParams{RolloutID: t.r.ID, TeamID: t.r.TeamID, At: t.now, Kind: kind,
		StepIndex: int32(t.r.StepIndex), State: t.r.State, Decision: decision, Message: msg, Actor: t.p.Who(), Verdict: vj, Windows: wj}); err != nil {
		return fmt.Errorf("rollout event: %w", err)
	}
	return outbox.Event(ctx, t.q, t.r.Team, busapi.Event{Kind: "rollout", ID: t.r.ID, Name: t.r.Endpoint, Type: kind,
		State: t.r.State, Message: msg, At: t.now})
}

// setWeights gives the candidate cand percent of the traffic (and shadow
// percent of mirrored copies) and the incumbent the rest. The endpoint's
// routing lock comes first and is held to commit: a reconcile pass writing
// the routing entry meanwhile waits and then reads the new weights, instead
// of publishing the old split after ours (route.Lock).
func (t *tx) setWeights(ctx context.Context, cand int, shadow float64) error {
	if err := route.Lock(ctx, t.q, t.r.EndpointID); err != nil {
		return err
	}
	if err := t.q.RoutingRuleUpsert(ctx, db.RoutingRuleUpsertParams{EndpointID: t.r.EndpointID, VersionID: t.r.ToVersionID,
		Weight: int32(cand), ShadowPercent: shadow}); err != nil {
		return fmt.Errorf("set weights: %w", err)
	}
	if err := t.q.RoutingRuleUpsert(ctx, db.RoutingRuleUpsertParams{EndpointID: t.r.EndpointID, VersionID: t.r.FromVersionID,
		Weight: int32(100 - cand), ShadowPercent: 0}); err != nil {
		return fmt.Errorf("set weights: %w", err)
	}
	t.routes = true
	return nil
}

// startStep makes step i current from now: its bake starts, and the first
// evaluation comes one interval later.
func (t *tx) startStep(i int) {
	now := t.now
	deadline := now.Add(t.r.Steps[i].bake())
	t.r.StepIndex, t.r.StepStartedAt, t.r.BakeDeadline, t.r.LastEvaluatedAt = i, &now, &deadline, &now
}

// finishAs ends the rollout in state; the losing version leaves the routing
// table after the keep time.
func (t *tx) finishAs(state string) {
	now := t.now
	cleanup := now.Add(time.Duration(t.r.KeepSeconds * float64(time.Second)))
	t.r.State, t.r.FinishedAt, t.r.CleanupAt = state, &now, &cleanup
}

// rollback sends all traffic back to the incumbent. The candidate stays in
// the routing table at weight 0, so its replicas stay up for inspection.
func (t *tx) rollback(ctx context.Context, msg string) error {
	if err := t.setWeights(ctx, 0, 0); err != nil {
		return err
	}
	note, err := t.endExperiment(ctx, t.r.ToVersionID, t.r.ToVersion)
	if err != nil {
		return err
	}
	t.finishAs(StateRolledBack)
	return t.save(ctx, "rollback", msg+note)
}

// endExperiment deletes the endpoint's A/B experiment when one of its arms
// is the version the rollout retires (Start refuses such an experiment,
// but one set around it must not keep sending users to a version that
// lost). The whole experiment goes: without one arm its shares no longer
// sum to 100. It returns a note for the state event, "" when nothing went.
func (t *tx) endExperiment(ctx context.Context, loserID int64, loser string) (string, error) {
	all, ids := t.p.Scope()
	arms, err := t.q.RolloutExperimentArms(ctx, db.RolloutExperimentArmsParams{EndpointID: t.r.EndpointID, AllTeams: all, TeamIDs: ids})
	if err != nil {
		return "", fmt.Errorf("experiment of %s: %w", t.r.Endpoint, err)
	}
	for _, a := range arms {
		if a.VersionID != loserID {
			continue
		}
		if _, err := t.q.ExperimentDelete(ctx, db.ExperimentDeleteParams{EndpointID: t.r.EndpointID, AllTeams: all, TeamIDs: ids}); err != nil {
			return "", fmt.Errorf("end experiment of %s: %w", t.r.Endpoint, err)
		}
		t.routes = true
		return fmt.Sprintf("; A/B experiment %q ended (it had an arm of %s)", a.Experiment, loser), nil
	}
	return "", nil
}

// promote makes the candidate the stable version.
func (t *tx) promote(ctx context.Context, msg string) error {
	if err := t.setWeights(ctx, 100, 0); err != nil {
		return err
	}
	note, err := t.endExperiment(ctx, t.r.FromVersionID, t.r.FromVersion)
	if err != nil {
		return err
	}
	t.r.StepIndex = len(t.r.Steps) - 1
	t.finishAs(StatePromoted)
	return t.save(ctx, "promote", msg+note)
}

// finish writes the routing entry of the rollout's endpoint when its
// routing rules changed, still inside the transaction; other endpoints'
// entries are the reconciler's business.
func (t *tx) finish(ctx context.Context) error {
	if !t.routes {
		return nil
	}
	_, err := route.Write(ctx, t.q, t.r.EndpointID, t.now)
	return err
}
