package handlers

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// TestPortalSharing: risk's engineer shares risk-endpoint with search from
// the endpoint's sharing page (a bad quota is a field error on the form),
// the page lists the grant with its limits, search's admin finds it under
// "Shared with me" with the model's schema and the route to call, risk's
// viewer reads the grants without the form, and a revocation empties
// both lists.
func TestPortalSharing(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	eng := portalSignIn(t, e, "risk-engineer@example.com")
	doc := eng.page("/endpoints/risk-endpoint")
	if href, _ := doc.Find("#sharing-link").Attr("href"); href != "/endpoints/risk-endpoint/sharing" {
		t.Errorf("endpoint page links sharing at %q", href)
	}
	doc = eng.page("/endpoints/risk-endpoint/sharing")
	if doc.Find("#grant-form").Length() != 1 || doc.Find("#grants-empty").Length() != 1 {
		t.Fatalf("sharing page before any grant: form %d, empty note %d", doc.Find("#grant-form").Length(), doc.Find("#grants-empty").Length())
	}

	r := eng.post("/endpoints/risk-endpoint/grants", eng.form("team", "search", "rate_limit_rps", "5", "daily_quota", "lots"))
	if r.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(portalText(r.doc(t).Find("#grant-form")), "whole number") {
		t.Fatalf("bad quota = %d, want 422 naming the field\n%s", r.StatusCode, r.Body)
	}
	r = eng.post("/endpoints/risk-endpoint/grants", eng.form("team", "risk"))
	if r.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(portalText(r.doc(t).Find("#grant-form")), "needs no grant") {
		t.Fatalf("grant to the owners = %d, want 422\n%s", r.StatusCode, r.Body)
	}
	r = eng.post("/endpoints/risk-endpoint/grants", eng.form("team", "search", "rate_limit_rps", "5", "rate_limit_burst", "10",
		"daily_quota", "20000", "sampling", "true"))
	if r.StatusCode != http.StatusSeeOther {
		t.Fatalf("grant = %d, want 303\n%s", r.StatusCode, r.Body)
	}
	row := eng.page("/endpoints/risk-endpoint/sharing").Find(`#grants tr[data-grant="search"]`)
	if got := portalText(row); !strings.Contains(got, "5/s (burst 10)") || !strings.Contains(got, "20,000/day") || !strings.Contains(got, "yes") {
		t.Errorf("grant row %q, want its limits", got)
	}

	viewer := portalSignIn(t, e, "risk-viewer@example.com")
	doc = viewer.page("/endpoints/risk-endpoint/sharing")
	if doc.Find("#grant-form").Length() != 0 || doc.Find(`#grants tr[data-grant="search"] button`).Length() != 0 {
		t.Errorf("risk viewer sees the form or a revoke button")
	}
	if doc.Find(`#grants tr[data-grant="search"]`).Length() != 1 {
		t.Errorf("risk viewer does not see the grant")
	}

	search := portalSignIn(t, e, "search-admin@example.com")
	card := search.page("/shared").Find(`[data-shared="risk-endpoint/search"]`)
	if card.Length() != 1 {
		t.Fatalf("search's shared-with-me has no card for risk-endpoint")
	}
	if got := portalText(card.Find(".owner")); got != "risk" {
		t.Errorf("owner shown %q, want risk", got)
	}
	if got := portalText(card); !strings.Contains(got, "POST /v1/endpoints/risk-endpoint/predict") || !strings.Contains(got, "20,000/day") {
		t.Errorf("shared card %q, want the route and the quota", got)
	}
	if !json.Valid([]byte(card.Find(".input-schema").Text())) || portalText(card.Find(".features")) != "x" {
		t.Errorf("shared card schema %q features %q", card.Find(".input-schema").Text(), portalText(card.Find(".features")))
	}
	// risk-model declares no output schema: the card says so instead of "{}".
	if got := portalText(card.Find(".output-schema")); got != "Output schema: none declared." {
		t.Errorf("shared card output schema %q; want none declared", got)
	}
	// The grant lets search call, not manage: the sharing page is risk's.
	if r := search.get("/endpoints/risk-endpoint/sharing"); r.StatusCode != http.StatusNotFound {
		t.Errorf("search opens risk's sharing page: %d, want 404", r.StatusCode)
	}
	if got := portalText(eng.page("/shared").Find("#shared-empty")); got == "" {
		t.Errorf("risk's shared-with-me is not empty")
	}

	// Chargeback groups by caller team, for the consumers' share.
	if eng.page("/chargeback").Find(`input[name="group_by"][value="caller_team"]`).Length() != 1 {
		t.Errorf("the chargeback page offers no caller_team grouping")
	}

	r = eng.post("/endpoints/risk-endpoint/grants/search/revoke", eng.form())
	if r.StatusCode != http.StatusSeeOther {
		t.Fatalf("revoke = %d, want 303\n%s", r.StatusCode, r.Body)
	}
	if search.page("/shared").Find("#shared-empty").Length() != 1 {
		t.Errorf("search still sees risk-endpoint shared after the revocation")
	}

	// A revocation that breaks inference graphs names them on the page.
	e.srv.Grants.SetDependents(dependents{"document-processor"})
	if r := eng.post("/endpoints/risk-endpoint/grants", eng.form("team", "search")); r.StatusCode != http.StatusSeeOther {
		t.Fatalf("grant again = %d", r.StatusCode)
	}
	r = eng.post("/endpoints/risk-endpoint/grants/search/revoke", eng.form())
	if r.StatusCode != http.StatusOK || portalText(r.doc(t).Find("#broken-graphs li")) != "document-processor" {
		t.Errorf("revoke breaking a graph = %d, want the page naming it\n%s", r.StatusCode, r.Body)
	}
}

// dependents stands in for the graph package's lookup of the graphs that
// call an endpoint (grant.Dependents): every endpoint, every team.
type dependents []string

func (d dependents) GraphsUsing(context.Context, int64, string) ([]string, error) { return d, nil }

// TestGrantsAPI: the API shares, lists and revokes, and the consumer's
// GET /shared lists what is shared with it.
func TestGrantsAPI(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	r := e.call(t, e.Keys["risk-engineer"], http.MethodPut, "/endpoints/risk-endpoint/grants/search",
		jsonPayload(map[string]any{"rate_limit_rps": 2.5, "daily_quota": 1000}))
	if r.status != http.StatusOK {
		t.Fatalf("grant = %d %s", r.status, r.body)
	}
	var list struct {
		Items []struct {
			Endpoint    string          `json:"endpoint"`
			Owner       string          `json:"owner"`
			Team        string          `json:"team"`
			DailyQuota  int64           `json:"daily_quota"`
			InputSchema json.RawMessage `json:"input_schema"`
		} `json:"items"`
	}
	e.getJSON(t, e.Keys["search-viewer"], "/shared", &list)
	if len(list.Items) != 1 || list.Items[0].Endpoint != "risk-endpoint" || list.Items[0].Owner != "risk" || list.Items[0].DailyQuota != 1000 ||
		string(list.Items[0].InputSchema) != `{"type": "object"}` && string(list.Items[0].InputSchema) != `{"type":"object"}` {
		t.Errorf("search's shared list %+v", list.Items)
	}
	e.getJSON(t, e.Keys["risk-viewer"], "/endpoints/risk-endpoint/grants", &list)
	if len(list.Items) != 1 || list.Items[0].Team != "search" {
		t.Errorf("risk's grants %+v", list.Items)
	}
	if r := e.call(t, e.Keys["risk-engineer"], http.MethodPut, "/endpoints/risk-endpoint/grants/no-such-team", jsonPayload(map[string]any{})); r.status != http.StatusBadRequest && r.status != http.StatusUnprocessableEntity {
		t.Errorf("grant to an unknown team = %d %s, want a field error", r.status, r.body)
	}
	r = e.call(t, e.Keys["risk-engineer"], http.MethodDelete, "/endpoints/risk-endpoint/grants/search", nil)
	var rv struct {
		Revoked      struct{ Team string } `json:"revoked"`
		BrokenGraphs []string              `json:"broken_graphs"`
	}
	if r.status != http.StatusOK || json.Unmarshal(r.body, &rv) != nil || rv.Revoked.Team != "search" || rv.BrokenGraphs == nil {
		t.Errorf("revoke = %d %s, want search's grant and an empty broken_graphs list", r.status, r.body)
	}
	if r := e.call(t, e.Keys["risk-engineer"], http.MethodDelete, "/endpoints/risk-endpoint/grants/search", nil); r.status != http.StatusNotFound {
		t.Errorf("revoking again = %d, want 404", r.status)
	}
}
