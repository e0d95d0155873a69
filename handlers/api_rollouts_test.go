package handlers

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// TestAPIRollouts drives a rollout through the API: start, the 409 that
// names the active rollout, list, an action without a body, an approval
// refused while nothing waits for one, a rollback with a comment, and a
// bad body answered field by field.
func TestAPIRollouts(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	eng, admin := e.Keys["risk-engineer"], e.Keys["risk-admin"]
	got := e.call(t, eng, http.MethodPost, "/endpoints/risk-endpoint/rollouts", jsonPayload(map[string]any{"version": "v2",
		"steps": []map[string]any{{"percent": 10, "bake_seconds": 60}, {"percent": 100, "bake_seconds": 60}}, "evaluation_interval_seconds": 5}))
	if got.status != http.StatusCreated {
		t.Fatalf("start = %d %s", got.status, got)
	}
	var r struct {
		ID                        int64
		State                     string
		FromVersion               string  `json:"from_version"`
		EvaluationIntervalSeconds float64 `json:"evaluation_interval_seconds"`
		Paused                    bool
	}
	if err := json.Unmarshal(got.body, &r); err != nil {
		t.Fatal(err)
	}
	if r.FromVersion != "v1" || r.EvaluationIntervalSeconds != 5 {
		t.Errorf("started = %s; want from v1, judged every 5 s", got)
	}
	again := e.call(t, eng, http.MethodPost, "/endpoints/risk-endpoint/rollouts", jsonPayload(map[string]any{"version": "v2"}))
	doc := problem(t, "second start", again, http.StatusConflict)
	if !strings.Contains(doc.Detail, fmt.Sprintf("active rollout: %d", r.ID)) {
		t.Errorf("second start detail %q, want it to name rollout %d", doc.Detail, r.ID)
	}
	var list struct{ Items []struct{ ID int64 } }
	e.getJSON(t, eng, "/endpoints/risk-endpoint/rollouts", &list)
	if len(list.Items) != 1 || list.Items[0].ID != r.ID {
		t.Errorf("list = %+v, want rollout %d", list.Items, r.ID)
	}
	path := fmt.Sprintf("/rollouts/%d", r.ID)
	if got := e.call(t, eng, http.MethodPost, path+"/pause", nil); got.status != http.StatusOK || !strings.Contains(string(got.body), `"paused":true`) {
		t.Errorf("pause without a body = %d %s, want 200 and paused", got.status, got)
	}
	doc = problem(t, "approve while starting", e.call(t, admin, http.MethodPost, path+"/approve", jsonPayload(map[string]any{"comment": "ok"})), http.StatusConflict)
	if !strings.Contains(doc.Detail, "not waiting for approval") {
		t.Errorf("approve while starting: %q", doc.Detail)
	}
	got = e.call(t, eng, http.MethodPost, path+"/rollback", jsonPayload(map[string]any{"comment": "wrong build"}))
	if got.status != http.StatusOK || !strings.Contains(string(got.body), `"state":"rolled_back"`) || !strings.Contains(string(got.body), "wrong build") {
		t.Errorf("rollback = %d %s, want rolled_back with the comment", got.status, got)
	}
	bad := e.call(t, eng, http.MethodPost, "/endpoints/risk-endpoint/rollouts", jsonPayload(map[string]any{"version": "v2",
		"steps": []map[string]any{{"percent": 10, "bake_seconds": 60}, {"percent": 50, "bake_seconds": 60}}}))
	if doc := problem(t, "steps without 100", bad, http.StatusBadRequest); !doc.names("body.steps") {
		t.Errorf("steps without 100: errors at %v, want body.steps", doc.locations())
	}
}
