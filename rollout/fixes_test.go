package rollout_test

import (
	"errors"
	"testing"
	"time"

	"modelplane/auth"
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
