package handlers

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"modelplane/auth"
	"modelplane/db"
	"modelplane/tenant"
)

// TestKeyShownWithThePersonBehindIt acts with an API key a person made
// and finds, wherever the act is shown, the person with the key's prefix
// ("risk-admin@example.com via mpk_…"): the rollout's started_by, its
// timeline's actor and message (API and portal), the version's
// created_by, and the audit log's who.
func TestKeyShownWithThePersonBehindIt(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	ctx := context.Background()
	var uid int64
	if err := e.pool.QueryRow(ctx, `SELECT id FROM users WHERE email = 'risk-admin@example.com'`).Scan(&uid); err != nil {
		t.Fatal(err)
	}
	ann, err := auth.LoadUser(ctx, db.New(e.pool), uid, "session")
	if err != nil {
		t.Fatal(err)
	}
	raw, k, err := e.srv.Tenant.CreateKey(ctx, ann, tenant.KeyRequest{Name: "ann-ci", Team: "risk", Role: auth.RoleAdmin})
	if err != nil {
		t.Fatal(err)
	}
	want := "risk-admin@example.com via " + k.Prefix

	got := e.call(t, raw, http.MethodPost, "/endpoints/risk-endpoint/rollouts", jsonPayload(map[string]any{"version": "v2",
		"steps": []map[string]any{{"percent": 10, "bake_seconds": 60}, {"percent": 100, "bake_seconds": 60}}}))
	if got.status != http.StatusCreated {
		t.Fatalf("start = %d %s", got.status, got)
	}
	var r struct {
		ID        int64  `json:"id"`
		StartedBy string `json:"started_by"`
		Events    []struct {
			Actor, Message string
		} `json:"events"`
	}
	if err := json.Unmarshal(got.body, &r); err != nil {
		t.Fatal(err)
	}
	if r.StartedBy != want || len(r.Events) == 0 || r.Events[0].Actor != want || !strings.HasSuffix(r.Events[0].Message, "started by "+want) {
		t.Errorf("rollout started with a key = %s; want %q as started_by, actor and in the message", got, want)
	}
	doc := portalSignIn(t, e, "risk-viewer@example.com").page(fmt.Sprintf("/rollouts/%d", r.ID))
	if html, _ := doc.Find("main").Html(); !strings.Contains(html, want) {
		t.Errorf("the rollout page does not show %q", want)
	}

	v := e.call(t, raw, http.MethodPost, "/models/risk-model/versions", jsonPayload(map[string]any{
		"metadata": map[string]any{"name": "v7", "runtime": "onnxruntime", "artifact_uri": "s3://b/v7", "format": "safetensors"},
		"manifest": map[string]string{"model.safetensors": strings.Repeat("ab", 32)}}))
	if v.status != http.StatusCreated || !strings.Contains(string(v.body), `"created_by":"`+want+`"`) {
		t.Errorf("version registered with a key = %d %s; want created_by %q", v.status, v, want)
	}

	var audit struct {
		Items []struct {
			Action, Who string
		} `json:"items"`
	}
	e.getJSON(t, raw, "/audit?action=rollout.start", &audit)
	if len(audit.Items) == 0 || audit.Items[0].Who != want {
		t.Errorf("audit of the start = %+v; want who %q", audit.Items, want)
	}
}
