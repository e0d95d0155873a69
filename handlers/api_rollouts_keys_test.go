package handlers

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"modelplane/auth"
	"modelplane/db"
	"modelplane/endpoint"
	"modelplane/rollout"
	"modelplane/tenant"
)

// TestAPIRolloutFourEyesThroughKeys: the person behind an API key is its
// creator, so who started a rollout in the portal cannot approve it with a
// key of theirs, and a key nobody owns approves nothing; both are 403s
// that say why.
func TestAPIRolloutFourEyesThroughKeys(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	ctx := context.Background()
	if _, err := e.srv.Endpoints.Create(ctx, system, endpoint.Spec{Name: "keys-endpoint", Model: "risk-model", Version: "v1", Runtime: "onnxruntime",
		Settings: endpoint.Settings{InstanceProfile: "mig-1g.10gb", MinReplicas: 0, MaxReplicas: 1, Tier: "batch", RetentionDays: 1}}); err != nil {
		t.Fatal(err)
	}
	readyReplica(t, e, "keys-endpoint", "v2")
	q := db.New(e.pool)
	var uid int64
	if err := e.pool.QueryRow(ctx, `SELECT id FROM users WHERE email = 'risk-admin@example.com'`).Scan(&uid); err != nil {
		t.Fatal(err)
	}
	ann, err := auth.LoadUser(ctx, q, uid, "session")
	if err != nil {
		t.Fatal(err)
	}
	annKey, _, err := e.srv.Tenant.CreateKey(ctx, ann, tenant.KeyRequest{Name: "ann-ci", Team: "risk", Role: auth.RoleAdmin})
	if err != nil {
		t.Fatal(err)
	}
	ro, err := e.srv.Rollouts.Start(ctx, ann, "keys-endpoint", rollout.Spec{Version: "v2", Strategy: rollout.BlueGreen,
		Steps: []rollout.Step{{Percent: 100, BakeSeconds: 60}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := rollout.NewController(rollout.ControllerConfig{Pool: e.pool, Stats: noStats{}}).Pass(ctx); err != nil {
		t.Fatal(err)
	}
	path := fmt.Sprintf("/rollouts/%d/approve", ro.ID)
	for _, c := range []struct {
		name, key, want string
	}{
		{"the initiator's own key", annKey, "four eyes"},
		{"a key with no owner", e.Keys["risk-admin"], "no known owner"},
	} {
		doc := problem(t, c.name, e.call(t, c.key, http.MethodPost, path, jsonPayload(map[string]any{"comment": "ok"})), http.StatusForbidden)
		if !strings.Contains(doc.Detail, c.want) {
			t.Errorf("%s: detail %q, want it to say %q", c.name, doc.Detail, c.want)
		}
	}
	if got, err := e.srv.Rollouts.Get(ctx, ann, ro.ID); err != nil || got.State != rollout.StateAwaitingApproval || len(got.Approvals) != 0 {
		t.Errorf("after refused approvals: %v %+v, want awaiting approval with none recorded", err, got.State)
	}
}
