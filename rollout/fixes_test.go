package rollout_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"modelplane/auth"
	"modelplane/field"
	"modelplane/judge"
	"modelplane/rollout"
)

// awaiting starts a one-step blue-green rollout of v2 by p and walks it to
// the approval of the switch.
func (f *fixture) awaiting(t *testing.T, p *auth.Principal) rollout.Rollout {
	t.Helper()
	r, err := f.svc.Start(t.Context(), p, "fraud-scoring", rollout.Spec{Version: "v2", Strategy: rollout.BlueGreen,
		Steps: []rollout.Step{{Percent: 100, BakeSeconds: 60}}, EvaluationInterval: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if f.count(t, "SELECT count(*) FROM replicas WHERE name = 'fraud-scoring-v2'") == 0 {
		f.ready(t, "fraud-scoring", "v2")
	}
	f.pass(t)
	if got := f.get(t, r.ID); got.State != rollout.StateAwaitingApproval {
		t.Fatalf("state %s, want awaiting_approval", got.State)
	}
	return r
}

// TestFourEyesThroughAPIKeys: the person behind an API key is its creator,
// so one person cannot start a rollout one way and approve it the other; a
// key nobody owns approves nothing.
func TestFourEyesThroughAPIKeys(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ann := f.admin // user 2, team admin of risk
	annKey := &auth.Principal{KeyID: 77, OwnerUserID: ann.UserID, Name: "mp_annkey", Via: "api-key",
		Teams: []auth.Membership{{TeamID: f.riskID, Team: "risk", Role: auth.RoleAdmin}}}
	orphanKey := &auth.Principal{KeyID: 78, Name: "mp_orphan", Via: "api-key", PlatformRole: auth.RolePlatformAdmin}

	t.Run("portal start, own key approves", func(t *testing.T) {
		r := f.awaiting(t, ann)
		if rollout.CanApprove(annKey, f.get(t, r.ID)) {
			t.Errorf("CanApprove(initiator's own key) = true, want false")
		}
		if _, err := f.svc.Approve(t.Context(), annKey, r.ID, "mine"); !errors.Is(err, auth.ErrForbidden) {
			t.Errorf("initiator approves with her key: %v, want forbidden", err)
		}
		if _, err := f.svc.Approve(t.Context(), orphanKey, r.ID, ""); !errors.Is(err, auth.ErrForbidden) {
			t.Errorf("key with no owner approves: %v, want forbidden", err)
		}
		if rollout.CanApprove(orphanKey, f.get(t, r.ID)) {
			t.Errorf("CanApprove(key with no owner) = true, want false")
		}
		if _, err := f.svc.Rollback(t.Context(), f.admin2, r.ID, "done"); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("key start, portal approves", func(t *testing.T) {
		r := f.awaiting(t, annKey)
		if got := f.get(t, r.ID); got.InitiatorUserID == nil || *got.InitiatorUserID != ann.UserID {
			t.Fatalf("initiator user = %v, want the key's owner %d", got.InitiatorUserID, ann.UserID)
		}
		if _, err := f.svc.Approve(t.Context(), ann, r.ID, "mine"); !errors.Is(err, auth.ErrForbidden) {
			t.Errorf("key owner approves in the portal: %v, want forbidden", err)
		}
		if _, err := f.svc.Approve(t.Context(), f.admin2, r.ID, "ok"); err != nil {
			t.Errorf("another admin approves: %v", err)
		}
	})
}

// readyN marks n more ready replicas of version, named with suffix.
func (f *fixture) readyN(t *testing.T, endpointName, version, suffix string, n int) {
	t.Helper()
	_, err := f.pool.Exec(t.Context(), `INSERT INTO nodes (name, lease_seconds, last_heartbeat) VALUES ('n1', 15, now()) ON CONFLICT DO NOTHING`)
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.pool.Exec(t.Context(), `INSERT INTO replicas (name, team_id, endpoint_id, version_id, node_id, gpu_type, profile, state, addr)
		SELECT e.name || '-' || v.name || '-' || $3 || g, e.team_id, e.id, v.id, (SELECT id FROM nodes WHERE name = 'n1'), 'H100-80GB', 'full', 'ready', '127.0.0.1:1'
		FROM endpoints e JOIN model_versions v ON v.model_id = e.model_id, generate_series(1, $4::int) g
		WHERE e.name = $1 AND v.name = $2`, endpointName, version, suffix, n)
	if err != nil {
		t.Fatal(err)
	}
}

// TestNoTrafficBeforeReadyReplicas: a canary of a scale-to-zero endpoint
// (min_replicas 0) still waits for one ready candidate replica, and a
// blue-green waits for as many as the incumbent serves with.
func TestNoTrafficBeforeReadyReplicas(t *testing.T) {
	t.Parallel()
	t.Run("canary with min_replicas 0", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t)
		if _, err := f.pool.Exec(t.Context(), `UPDATE endpoints SET min_replicas = 0 WHERE name = 'fraud-scoring'`); err != nil {
			t.Fatal(err)
		}
		r := f.canary(t)
		f.pass(t)
		if w := f.weights(t, "fraud-scoring"); !equal(w, map[string]float64{"v1": 100, "v2": 0}) {
			t.Fatalf("no candidate replica ready: weights %v, want v1 100", w)
		}
		if got := f.get(t, r.ID); got.State != rollout.StateStarting {
			t.Fatalf("no candidate replica ready: state %s, want starting", got.State)
		}
		f.ready(t, "fraud-scoring", "v2")
		f.pass(t)
		if w := f.weights(t, "fraud-scoring"); !equal(w, map[string]float64{"v1": 90, "v2": 10}) {
			t.Fatalf("candidate ready: weights %v, want 90/10", w)
		}
	})
	t.Run("blue-green waits for the incumbent's ready count", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t)
		f.readyN(t, "fraud-scoring", "v1", "i", 3)
		r, err := f.svc.Start(t.Context(), f.eng, "fraud-scoring", rollout.Spec{Version: "v2", Strategy: rollout.BlueGreen,
			Steps: []rollout.Step{{Percent: 100, BakeSeconds: 60}}, EvaluationInterval: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		f.readyN(t, "fraud-scoring", "v2", "c", 2)
		f.pass(t)
		if got := f.get(t, r.ID); got.State != rollout.StateStarting {
			t.Fatalf("2 of the incumbent's 3 ready: state %s (%s), want starting", got.State, got.Reason)
		}
		f.readyN(t, "fraud-scoring", "v2", "d", 1)
		f.pass(t)
		if got := f.get(t, r.ID); got.State != rollout.StateAwaitingApproval {
			t.Fatalf("3 ready: state %s (%s), want awaiting_approval", got.State, got.Reason)
		}
	})
}

// TestStartRefusals: a canary that goes to 100 percent in its first step
// judges nothing before all traffic moved, and a drift gate asked for where
// nothing measures drift would hold forever: both are field errors.
func TestStartRefusals(t *testing.T) {
	t.Parallel()
	f := newFixture(t) // its Service has no drift measurer
	on := true
	for _, tt := range []struct {
		name      string
		spec      rollout.Spec
		wantField string
		wantText  string
	}{
		{"canary of one 100 percent step", rollout.Spec{Version: "v2", Steps: []rollout.Step{{Percent: 100, BakeSeconds: 60}}}, "steps", "blue-green"},
		{"drift gate on a blue-green", rollout.Spec{Version: "v2", Strategy: rollout.BlueGreen, Steps: []rollout.Step{{Percent: 100, BakeSeconds: 60}},
			Criteria: rollout.CriteriaSpec{Drift: &on}}, "criteria.drift", "blue-green"},
		{"drift gate without a measurer", rollout.Spec{Version: "v2", Criteria: rollout.CriteriaSpec{Drift: &on}}, "criteria.drift", "drift: false"},
	} {
		_, err := f.svc.Start(t.Context(), f.eng, "fraud-scoring", tt.spec)
		var verr field.Errors
		if !errors.As(err, &verr) || len(verr) != 1 || verr[0].Field != tt.wantField || !strings.Contains(verr[0].Message, tt.wantText) {
			t.Errorf("%s: %v; want one %s field error mentioning %q", tt.name, err, tt.wantField, tt.wantText)
		}
	}
	if n := f.count(t, "SELECT count(*) FROM rollouts"); n != 0 {
		t.Errorf("%d rollouts after refused starts, want 0", n)
	}
}

// experiment sets fraud-scoring's A/B experiment straight in the table
// (package endpoint refuses one during a rollout; this is one set around
// it, or before that guard existed).
func (f *fixture) experiment(t *testing.T, versions ...string) {
	t.Helper()
	ctx := t.Context()
	if _, err := f.pool.Exec(ctx, `DELETE FROM experiments`); err != nil {
		t.Fatal(err)
	}
	if _, err := f.pool.Exec(ctx, `INSERT INTO experiments (endpoint_id, name) SELECT id, 'ab' FROM endpoints WHERE name = 'fraud-scoring'`); err != nil {
		t.Fatal(err)
	}
	if _, err := f.pool.Exec(ctx, `INSERT INTO experiment_arms (endpoint_id, version_id, share)
		SELECT e.id, v.id, 100 / cardinality($1::text[]) FROM endpoints e JOIN model_versions v ON v.model_id = e.model_id
		WHERE e.name = 'fraud-scoring' AND v.name = ANY($1::text[])`, versions); err != nil {
		t.Fatal(err)
	}
}

// TestRolloutsAndExperiments: a rollout does not start on a version an A/B
// experiment splits users over, and its end deletes an experiment with an
// arm of the version it retired (the candidate on rollback, the incumbent
// on promotion), in the same transaction.
func TestRolloutsAndExperiments(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	for _, arms := range [][]string{{"v1", "v3"}, {"v2", "v3"}} {
		f.experiment(t, arms...)
		_, err := f.svc.Start(t.Context(), f.eng, "fraud-scoring", rollout.Spec{Version: "v2"})
		var verr field.Errors
		if !errors.As(err, &verr) || verr[0].Field != "version" || !strings.Contains(verr[0].Message, "experiment") {
			t.Errorf("start with an experiment over %v: %v, want a version field error naming the experiment", arms, err)
		}
	}
	armsLeft := func() int { return f.count(t, "SELECT count(*) FROM experiment_arms") }

	// Rollback with an experiment over the candidate: it goes.
	if _, err := f.pool.Exec(t.Context(), `DELETE FROM experiments`); err != nil {
		t.Fatal(err)
	}
	r := f.canary(t)
	f.experiment(t, "v2", "v3")
	got, err := f.svc.Rollback(t.Context(), f.eng, r.ID, "bad")
	if err != nil {
		t.Fatal(err)
	}
	if n := armsLeft(); n != 0 || !strings.Contains(got.Reason, "experiment") {
		t.Errorf("after rollback: %d arms left, reason %q; want the candidate's experiment ended and said so", n, got.Reason)
	}

	// Rollback with an experiment not over the candidate: it stays.
	f.stats.set("v1", window(500, 0, 10))
	f.stats.set("v3", window(500, 0, 10))
	r, err = f.svc.Start(t.Context(), f.eng, "fraud-scoring", rollout.Spec{Version: "v3", Strategy: rollout.BlueGreen,
		Steps: []rollout.Step{{Percent: 100, BakeSeconds: 60}}, EvaluationInterval: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	f.experiment(t, "v1", "v2")
	if _, err := f.svc.Rollback(t.Context(), f.eng, r.ID, "not now"); err != nil {
		t.Fatal(err)
	}
	if n := armsLeft(); n != 2 {
		t.Errorf("after rolling back v3: %d arms, want the v1/v2 experiment kept", n)
	}

	// Promotion with an experiment over the incumbent: it goes.
	if _, err := f.pool.Exec(t.Context(), `DELETE FROM experiments`); err != nil {
		t.Fatal(err)
	}
	r, err = f.svc.Start(t.Context(), f.eng, "fraud-scoring", rollout.Spec{Version: "v3", Strategy: rollout.BlueGreen,
		Steps: []rollout.Step{{Percent: 100, BakeSeconds: 60}}, EvaluationInterval: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	f.ready(t, "fraud-scoring", "v3")
	f.pass(t)
	if _, err := f.svc.Approve(t.Context(), f.admin, r.ID, ""); err != nil {
		t.Fatal(err)
	}
	f.pass(t)
	f.stats.setPast(f.clock.Now(), map[string]judge.Window{"v1": window(500, 0, 10)})
	f.stats.set("v1", judge.Window{})
	f.experiment(t, "v1", "v2")
	for range 7 {
		f.clock.Advance(10 * time.Second)
		f.pass(t)
	}
	got = f.get(t, r.ID)
	if got.State != rollout.StatePromoted {
		t.Fatalf("state %s (%s), want promoted", got.State, got.Reason)
	}
	if n := armsLeft(); n != 0 || !strings.Contains(got.Reason, "experiment") {
		t.Errorf("after promotion: %d arms left, reason %q; want the incumbent's experiment ended and said so", n, got.Reason)
	}
	if w := f.published(t, "fraud-scoring"); w["v3"] != 100 || w["v1"] != 0 {
		t.Errorf("routing entry written at promotion: weights %v, want v3 100", w)
	}
}
