package handlers

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// TestQuotasOverTheAPI: platform admins set a team's GPU quota; one below
// what the team's minimum replicas hold is a 400 on amount naming the
// endpoint; a team admin is refused; the team sees its quota and the change
// is audited.
func TestQuotasOverTheAPI(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	e.seedFleet(t) // risk-endpoint's one mig-1g.10gb replica: 1/7 of an A100
	admin := e.Keys["platform-admin"]
	set := func(key string, amount float64) response {
		return e.call(t, key, http.MethodPost, "/quotas", jsonPayload(map[string]any{"team": "risk", "resource": "A100-80GB", "amount": amount}))
	}
	doc := problem(t, "quota 0 under a minimum", set(admin, 0), http.StatusBadRequest)
	if !doc.names("body.amount") || len(doc.Errors) != 1 || !strings.Contains(doc.Errors[0].Message, "risk-endpoint (0.14)") {
		t.Errorf("quota below the minimum: errors %+v; want body.amount naming risk-endpoint (0.14)", doc.Errors)
	}
	problem(t, "team admin sets a quota", set(e.Keys["risk-admin"], 4), http.StatusForbidden)
	if got := set(admin, 4); got.status != http.StatusCreated {
		t.Fatalf("platform admin POST /quotas = %d %s; want 201", got.status, got)
	}
	var list struct {
		Items []struct {
			Team     string  `json:"team"`
			Resource string  `json:"resource"`
			Amount   float64 `json:"amount"`
		} `json:"items"`
	}
	e.getJSON(t, e.Keys["risk-viewer"], "/quotas", &list)
	if len(list.Items) != 1 || list.Items[0].Team != "risk" || list.Items[0].Amount != 4 {
		t.Errorf("GET /quotas as risk viewer = %+v; want risk's A100 quota of 4", list.Items)
	}
	e.getJSON(t, e.Keys["search-admin"], "/quotas", &list)
	if len(list.Items) != 0 {
		t.Errorf("GET /quotas as search admin = %+v; want none of risk's", list.Items)
	}
	var audit struct {
		Items []struct {
			Action     string          `json:"action"`
			ObjectName string          `json:"object_name"`
			After      json.RawMessage `json:"after"`
		} `json:"items"`
	}
	e.getJSON(t, admin, "/audit", &audit)
	found := false
	for _, a := range audit.Items {
		found = found || a.Action == "quota.set" && a.ObjectName == "risk/A100-80GB"
	}
	if !found {
		t.Errorf("no quota.set audit record for risk/A100-80GB in %+v", audit.Items)
	}
	if got := e.call(t, admin, http.MethodDelete, "/quotas/risk/A100-80GB", nil); got.status != http.StatusNoContent {
		t.Errorf("DELETE /quotas/risk/A100-80GB = %d %s; want 204", got.status, got)
	}
	problem(t, "delete a quota twice", e.call(t, admin, http.MethodDelete, "/quotas/risk/A100-80GB", nil), http.StatusNotFound)
}

// TestQuotasPage: a platform admin sets a quota from the portal's form and
// sees it listed; a refused amount comes back on the field with the
// endpoint named; a team member sees the list without the form.
func TestQuotasPage(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	e.seedFleet(t)
	admin := portalSignIn(t, e, "admin@example.com")
	got := admin.post("/quotas", admin.form("team", "risk", "resource", "A100-80GB", "amount", "0"))
	if got.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(string(got.Body), "risk-endpoint (0.14)") {
		t.Fatalf("POST /quotas below the minimum = %d; want 422 naming risk-endpoint (0.14): %s", got.StatusCode, got.Body)
	}
	if got := admin.post("/quotas", admin.form("team", "risk", "resource", "A100-80GB", "amount", "2.5")); got.StatusCode != http.StatusSeeOther {
		t.Fatalf("POST /quotas = %d, want 303: %s", got.StatusCode, got.Body)
	}
	doc := admin.page("/quotas")
	if row := strings.Join(strings.Fields(doc.Find(`tr[data-quota="risk/A100-80GB"] .amount`).Text()), " "); row != "2.5 GPU equivalents" {
		t.Errorf("quota row = %q, want 2.5 GPU equivalents", row)
	}
	if admin.page("/fleet").Find("#quotas-link").Length() != 1 {
		t.Error("the fleet page has no link to the quotas")
	}
	vdoc := portalSignIn(t, e, "risk-viewer@example.com").page("/quotas")
	if vdoc.Find("#quota-form").Length() != 0 || vdoc.Find(`tr[data-quota="risk/A100-80GB"]`).Length() != 1 {
		t.Errorf("risk viewer sees form %d, row %d; want the row without the form",
			vdoc.Find("#quota-form").Length(), vdoc.Find(`tr[data-quota="risk/A100-80GB"]`).Length())
	}
}

// TestQuotaNoteOnTheEndpoint: an endpoint whose replica a quota holds
// back says which quota in its API placement_error and on its page.
func TestQuotaNoteOnTheEndpoint(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	e.seedFleet(t)
	admin := e.Keys["platform-admin"]
	// risk-endpoint's one replica holds 1/7 of an A100: the quota is full.
	if got := e.call(t, admin, http.MethodPost, "/quotas", jsonPayload(map[string]any{"team": "risk", "resource": "A100-80GB", "amount": 1.0 / 7})); got.status != http.StatusCreated {
		t.Fatalf("POST /quotas = %d %s", got.status, got)
	}
	if got := e.call(t, e.Keys["risk-engineer"], http.MethodPost, "/endpoints", jsonPayload(map[string]any{"name": "risk-more", "model": "risk-model",
		"version": "v1", "runtime": "onnxruntime", "instance_profile": "mig-1g.10gb", "min_replicas": 1, "max_replicas": 1, "tier": "standard"})); got.status != http.StatusCreated {
		t.Fatalf("POST /endpoints = %d %s", got.status, got)
	}
	e.reconcile(t)
	var ep struct {
		Status         string `json:"status"`
		PlacementError string `json:"placement_error"`
	}
	e.getJSON(t, e.Keys["risk-viewer"], "/endpoints/risk-more", &ep)
	const want = "v1: quota: team risk holds 0.14 of 0.14 A100-80GB GPUs"
	if ep.PlacementError != want {
		t.Errorf("GET /endpoints/risk-more placement_error = %q (status %s), want %q", ep.PlacementError, ep.Status, want)
	}
	msg := portalText(portalSignIn(t, e, "risk-viewer@example.com").page("/endpoints/risk-more").Find("#replicas #placement-error"))
	if !strings.Contains(msg, want) {
		t.Errorf("endpoint page shows %q, want the quota note %q", msg, want)
	}
}
