package handlers

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// TestWebhooksAPI: a team admin adds a webhook and gets its secret once
// (never cached), lists it, reads its delivery log, rotates the secret and
// removes it; an address the egress policy refuses is a 400 on url.
func TestWebhooksAPI(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	admin := e.Keys["risk-admin"]
	r := e.call(t, admin, http.MethodPost, "/webhooks", jsonPayload(map[string]any{"team": "risk", "url": "https://hooks.example.com/a",
		"event_types": []string{"rollout.state", "drift.alert"}}))
	var created struct {
		ID     int64    `json:"id"`
		Team   string   `json:"team"`
		Types  []string `json:"event_types"`
		Secret string   `json:"secret"`
	}
	if r.status != http.StatusCreated || json.Unmarshal(r.body, &created) != nil || !strings.HasPrefix(created.Secret, "whsec_") ||
		!strings.Contains(r.header.Get("Cache-Control"), "no-store") {
		t.Fatalf("create = %d %s (Cache-Control %q); want 201 with a whsec_ secret, no-store", r.status, r, r.header.Get("Cache-Control"))
	}
	list := e.call(t, admin, http.MethodGet, "/webhooks", nil)
	if list.status != http.StatusOK || !strings.Contains(string(list.body), "https://hooks.example.com/a") || strings.Contains(string(list.body), created.Secret) {
		t.Errorf("list = %d %s; want the webhook without its secret", list.status, list)
	}
	if d := e.call(t, admin, http.MethodGet, fmt.Sprintf("/webhooks/%d/deliveries", created.ID), nil); d.status != http.StatusOK {
		t.Errorf("deliveries = %d %s", d.status, d)
	}
	rot := e.call(t, admin, http.MethodPost, fmt.Sprintf("/webhooks/%d/rotate-secret", created.ID), nil)
	var rotated struct {
		Secret string `json:"secret"`
	}
	if rot.status/100 != 2 || json.Unmarshal(rot.body, &rotated) != nil || rotated.Secret == created.Secret || !strings.HasPrefix(rotated.Secret, "whsec_") {
		t.Errorf("rotate = %d %s; want a new secret", rot.status, rot)
	}
	bad := e.call(t, admin, http.MethodPost, "/webhooks", jsonPayload(map[string]any{"team": "risk", "url": "https://169.254.169.254/latest",
		"event_types": []string{"*"}}))
	if bad.status != http.StatusBadRequest || !strings.Contains(string(bad.body), "url") {
		t.Errorf("metadata address = %d %s; want 400 on url", bad.status, bad)
	}
	if del := e.call(t, admin, http.MethodDelete, fmt.Sprintf("/webhooks/%d", created.ID), nil); del.status/100 != 2 {
		t.Errorf("delete = %d %s", del.status, del)
	}
	if d := e.call(t, admin, http.MethodGet, fmt.Sprintf("/webhooks/%d/deliveries", created.ID), nil); d.status != http.StatusNotFound {
		t.Errorf("deliveries after delete = %d; want 404", d.status)
	}
}
