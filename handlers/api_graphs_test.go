package handlers

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// graphBody is a POST /graphs body over the given definition.
func graphBody(name string, def string) *payload {
	return jsonPayload(map[string]any{"name": name, "graph": json.RawMessage(def)})
}

// TestGraphValidationAtSave saves graphs over the seeded endpoints: a valid
// one is created as an endpoint of kind graph; a cycle, a target of another
// team, a missing target, an LLM-free type error, a fan-out past the limit
// and a cycle through another graph are refused with a 400 naming the node.
func TestGraphValidationAtSave(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	risk := e.Keys["risk-admin"]

	ok := `{"entry":"s","nodes":[{"id":"s","type":"sequence","steps":["a","b"]},
	 {"id":"a","type":"call","endpoint":"risk-endpoint"},{"id":"b","type":"call","endpoint":"risk-endpoint","soft":true,"timeout_ms":50}]}`
	r := e.call(t, risk, http.MethodPost, "/graphs", graphBody("risk-graph", ok))
	if r.status != http.StatusCreated {
		t.Fatalf("POST /graphs = %d %s; want 201", r.status, r)
	}
	var created struct{ Kind, Task, Runtime, Team, Status string }
	if err := json.Unmarshal(r.body, &created); err != nil || created.Kind != "graph" || created.Team != "risk" || created.Runtime != "graph" || created.Status != "ready" {
		t.Fatalf("created %s; want a ready endpoint of kind graph of risk", r)
	}
	if g := e.call(t, risk, http.MethodGet, "/endpoints/risk-graph", nil); g.status != http.StatusOK || !strings.Contains(g.String(), `"kind":"graph"`) || !strings.Contains(g.String(), `"status":"ready"`) {
		t.Errorf("GET the graph endpoint = %d %s; want 200, kind graph", g.status, g)
	}

	for _, tc := range []struct {
		name, def, node string
	}{
		{"cycle", `{"entry":"s","nodes":[{"id":"s","type":"sequence","steps":["a","loop"]},{"id":"a","type":"call","endpoint":"risk-endpoint"},
		  {"id":"loop","type":"sequence","steps":["s"]}]}`, "s"},
		{"another team's endpoint", `{"entry":"x","nodes":[{"id":"x","type":"call","endpoint":"search-endpoint"}]}`, "x"},
		{"no such endpoint", `{"entry":"x","nodes":[{"id":"x","type":"call","endpoint":"nowhere"}]}`, "x"},
		{"calls itself", `{"entry":"x","nodes":[{"id":"x","type":"call","endpoint":"bad-graph"}]}`, "x"},
		{"retries of a step not idempotent", `{"entry":"x","nodes":[{"id":"x","type":"call","endpoint":"risk-endpoint","retries":2}]}`, "x"},
		{"fan-out past the limit", `{"entry":"e","nodes":[{"id":"e","type":"ensemble","combine":"collect","steps":["a","a","a","a","a","a","a","a","a"]},
		  {"id":"a","type":"call","endpoint":"risk-endpoint"}]}`, "e"},
		{"a splitter's weights sum to 0", `{"entry":"p","nodes":[{"id":"p","type":"splitter","branches":[{"weight":0,"node":"a"},{"weight":0,"node":"a"}]},
		  {"id":"a","type":"call","endpoint":"risk-endpoint"}]}`, "p"},
	} {
		r := e.call(t, risk, http.MethodPost, "/graphs", graphBody("bad-graph", tc.def))
		if r.status != http.StatusBadRequest && r.status != http.StatusUnprocessableEntity {
			t.Errorf("%s: %d %s; want 400", tc.name, r.status, r)
			continue
		}
		if !strings.Contains(r.String(), `graph.nodes[`+tc.node+`]`) || !strings.Contains(r.String(), `\"`+tc.node+`\"`) {
			t.Errorf("%s: %s; want the node %q named", tc.name, r, tc.node)
		}
	}
	if r := e.call(t, risk, http.MethodGet, "/endpoints/bad-graph", nil); r.status != http.StatusNotFound {
		t.Errorf("a refused graph exists: GET = %d", r.status)
	}

	// A graph's model takes no artifact version, and no plain endpoint.
	if r := e.call(t, risk, http.MethodPost, "/models/risk-graph/versions", versionExternal("v9")); r.status != http.StatusBadRequest && r.status != http.StatusUnprocessableEntity {
		t.Errorf("registering an artifact version of a graph's model = %d %s; want 400", r.status, r)
	}
	plain := jsonPayload(map[string]any{"name": "plain-over-graph", "model": "risk-graph", "version": "v1"})
	if r := e.call(t, risk, http.MethodPost, "/endpoints", plain); r.status != http.StatusBadRequest && r.status != http.StatusUnprocessableEntity {
		t.Errorf("a plain endpoint over a graph's model = %d %s; want 400", r.status, r)
	}

	// A cycle across graphs: outer calls risk-graph; a new version of
	// risk-graph calling outer is refused, naming its node.
	outer := `{"entry":"o","nodes":[{"id":"o","type":"call","endpoint":"risk-graph"}]}`
	if r := e.call(t, risk, http.MethodPost, "/graphs", graphBody("outer", outer)); r.status != http.StatusCreated {
		t.Fatalf("outer graph = %d %s", r.status, r)
	}
	back := `{"entry":"back","nodes":[{"id":"back","type":"call","endpoint":"outer"}]}`
	r = e.call(t, risk, http.MethodPost, "/endpoints/risk-graph/graph/versions", jsonPayload(map[string]any{"version": "v2", "graph": json.RawMessage(back)}))
	if r.status != http.StatusBadRequest && r.status != http.StatusUnprocessableEntity || !strings.Contains(r.String(), "graph.nodes[back]") {
		t.Errorf("a version closing a cycle through outer: %d %s; want 400 naming back", r.status, r)
	}

	// A valid new version is saved without traffic; the list shows both.
	v2 := `{"entry":"a","nodes":[{"id":"a","type":"call","endpoint":"risk-endpoint","idempotent":true,"retries":1}]}`
	if r := e.call(t, risk, http.MethodPost, "/endpoints/risk-graph/graph/versions", jsonPayload(map[string]any{"version": "v2", "graph": json.RawMessage(v2)})); r.status != http.StatusCreated {
		t.Fatalf("graph version v2 = %d %s; want 201", r.status, r)
	}
	r = e.call(t, risk, http.MethodGet, "/endpoints/risk-graph/graph/versions", nil)
	var list struct {
		Items []struct {
			Name   string
			Weight int
			Graph  struct{ Entry string }
		}
	}
	if err := json.Unmarshal(r.body, &list); err != nil || len(list.Items) != 2 || list.Items[0].Weight != 100 || list.Items[1].Weight != -1 || list.Items[1].Graph.Entry != "a" {
		t.Errorf("graph versions = %d %s; want v1 at 100 and v2 unrouted", r.status, r)
	}
	// Another team sees none of it.
	if r := e.call(t, e.Keys["search-admin"], http.MethodGet, "/endpoints/risk-graph/graph/versions", nil); r.status != http.StatusNotFound {
		t.Errorf("search listing risk's graph versions = %d; want 404", r.status)
	}
}

// TestGraphPageDiagram: a graph endpoint's page draws each version as
// nested boxes, routed version first, each node with what it calls and how,
// and no replica section.
func TestGraphPageDiagram(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	def := `{"entry":"s","nodes":[{"id":"s","type":"sequence","steps":["pick","both"]},
	 {"id":"pick","type":"switch","cases":[{"field":"request/instances/0/amount","op":"gt","value":1000,"then":"a"}],"default":"b"},
	 {"id":"both","type":"ensemble","steps":["a","b"],"combine":"weighted_mean","weights":[2,1]},
	 {"id":"a","type":"call","endpoint":"risk-endpoint","timeout_ms":40,"soft":true},{"id":"b","type":"call","endpoint":"risk-endpoint","idempotent":true,"retries":1}]}`
	if r := e.call(t, e.Keys["risk-admin"], http.MethodPost, "/graphs", graphBody("risk-graph", def)); r.status != http.StatusCreated {
		t.Fatalf("POST /graphs = %d %s", r.status, r)
	}
	v2 := `{"entry":"a","nodes":[{"id":"a","type":"call","endpoint":"risk-endpoint"}]}`
	if r := e.call(t, e.Keys["risk-admin"], http.MethodPost, "/endpoints/risk-graph/graph/versions", jsonPayload(map[string]any{"version": "v2", "graph": json.RawMessage(v2)})); r.status != http.StatusCreated {
		t.Fatalf("graph version = %d %s", r.status, r)
	}
	u := portalSignIn(t, e, "risk-viewer@example.com")
	d := u.page("/endpoints/risk-graph")
	versions := d.Find("#graph .graph-version")
	if versions.Length() != 2 || versions.First().AttrOr("data-version", "") != "v1" {
		t.Fatalf("%d version diagrams, first %q; want v1 then v2", versions.Length(), versions.First().AttrOr("data-version", ""))
	}
	v1 := versions.First()
	if got := v1.Find(".graph-sequence > .graph-children.graph-row > .graph-node").Length(); got != 2 {
		t.Errorf("the sequence shows %d steps in a row; want 2", got)
	}
	sw := v1.Find(`[data-node="pick"]`)
	if edge := sw.Find(".graph-edge").First().Text(); !strings.Contains(edge, "request/instances/0/amount gt 1000") {
		t.Errorf("switch's first edge %q; want its condition", edge)
	}
	a := v1.Find(`[data-node="a"]`).First()
	if href := a.Find("a").AttrOr("href", ""); href != "/endpoints/risk-endpoint" || !strings.Contains(a.Find(".graph-detail").Text(), "timeout 40 ms · soft") {
		t.Errorf("node a links %q details %q; want its endpoint and timeout 40 ms · soft", href, a.Find(".graph-detail").Text())
	}
	if b := v1.Find(`[data-node="b"] .graph-detail`).First().Text(); !strings.Contains(b, "idempotent, 1 retry") || strings.Contains(b, "retries") {
		t.Errorf("node b details %q; want idempotent, 1 retry", b)
	}
	if card := d.Find(".card").First().Text(); d.Find("#replicas").Length() != 0 || strings.Contains(card, "Replicas") || strings.Contains(card, "cpu") {
		t.Errorf("a graph endpoint's page shows replicas or a profile: %q", card)
	}
}

// TestPortalPublishesGraph: an engineer publishes a graph from the portal
// form and lands on its page; a definition with a cycle comes back 422
// naming the node, with what was typed kept.
func TestPortalPublishesGraph(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	u := portalSignIn(t, e, "risk-engineer@example.com")
	if d := u.page("/graphs/new"); d.Find("#graph-form textarea#graph").Length() != 1 {
		t.Fatalf("no definition field on the new graph page")
	}
	bad := `{"entry":"s","nodes":[{"id":"s","type":"sequence","steps":["a","s"]},{"id":"a","type":"call","endpoint":"risk-endpoint"}]}`
	r := u.post("/graphs", u.form("name", "portal-graph", "team", "risk", "graph", bad))
	if r.StatusCode != http.StatusUnprocessableEntity {
		t.Fatalf("a cycle: %d; want 422", r.StatusCode)
	}
	d := r.doc(t)
	if msg := d.Find(`[data-field="graph"]`).Text(); !strings.Contains(msg, `"s"`) || !strings.Contains(msg, "cycle") {
		t.Errorf("the error under the definition is %q; want the cycle naming node s", msg)
	}
	if kept := d.Find("textarea#graph").Text(); kept != bad {
		t.Errorf("the form kept %q; want what was typed", kept)
	}
	good := `{"entry":"a","nodes":[{"id":"a","type":"call","endpoint":"risk-endpoint"}]}`
	r = u.post("/graphs", u.form("name", "portal-graph", "team", "risk", "graph", good))
	if r.StatusCode != http.StatusSeeOther || r.Header.Get("Location") != "/endpoints/portal-graph" {
		t.Fatalf("publishing: %d to %q; want 303 to the graph's page", r.StatusCode, r.Header.Get("Location"))
	}
	if d := u.page("/endpoints/portal-graph"); d.Find(`#graph [data-node="a"]`).Length() != 1 {
		t.Errorf("the published graph's page draws no node a")
	}
}

// TestPortalSavesGraphVersion: the graph's page saves a new version from
// its form, unrouted, and refuses one calling another team's endpoint,
// naming the node.
func TestPortalSavesGraphVersion(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	def := `{"entry":"a","nodes":[{"id":"a","type":"call","endpoint":"risk-endpoint"}]}`
	if r := e.call(t, e.Keys["risk-admin"], http.MethodPost, "/graphs", graphBody("risk-graph", def)); r.status != http.StatusCreated {
		t.Fatalf("POST /graphs = %d %s", r.status, r)
	}
	u := portalSignIn(t, e, "risk-engineer@example.com")
	d := u.page("/endpoints/risk-graph")
	if got := d.Find("textarea#graph_definition").Text(); !strings.Contains(got, `"endpoint": "risk-endpoint"`) {
		t.Errorf("the new version's definition starts as %q; want the routed version's", got)
	}
	other := `{"entry":"x","nodes":[{"id":"x","type":"call","endpoint":"search-endpoint"}]}`
	r := u.post("/endpoints/risk-graph/graph/versions", u.form("graph_version", "v2", "graph_definition", other))
	if r.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(r.doc(t).Find(`[data-field="graph_definition"]`).Text(), `"x"`) {
		t.Fatalf("another team's target: %d; want 422 naming node x", r.StatusCode)
	}
	r = u.post("/endpoints/risk-graph/graph/versions", u.form("graph_version", "v2", "graph_definition", def))
	if r.StatusCode != http.StatusSeeOther {
		t.Fatalf("saving v2: %d; want 303", r.StatusCode)
	}
	if v := u.page("/endpoints/risk-graph").Find(`.graph-version[data-version="v2"]`); v.Length() != 1 || !strings.Contains(v.Text(), "not routed") {
		t.Errorf("v2 is not drawn as an unrouted version")
	}
	viewer := portalSignIn(t, e, "risk-viewer@example.com")
	if r := viewer.post("/endpoints/risk-graph/graph/versions", viewer.form("graph_version", "v3", "graph_definition", def)); r.StatusCode != http.StatusForbidden {
		t.Errorf("a viewer saving a version: %d; want 403", r.StatusCode)
	}
}

// TestGraphOverAGrantedEndpoint: a graph may call another team's endpoint
// once its owners grant the graph's team access, and revoking that grant
// names the graph it breaks.
func TestGraphOverAGrantedEndpoint(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	risk, search := e.Keys["risk-admin"], e.Keys["search-admin"]
	def := `{"entry":"x","nodes":[{"id":"x","type":"call","endpoint":"search-endpoint"}]}`
	if r := e.call(t, risk, http.MethodPost, "/graphs", graphBody("over-search", def)); r.status != http.StatusBadRequest && r.status != http.StatusUnprocessableEntity {
		t.Fatalf("a graph over search's endpoint before a grant = %d %s; want 400", r.status, r)
	}
	if r := e.call(t, search, http.MethodPut, "/endpoints/search-endpoint/grants/risk", jsonPayload(map[string]any{})); r.status != http.StatusOK {
		t.Fatalf("grant = %d %s", r.status, r)
	}
	if r := e.call(t, risk, http.MethodPost, "/graphs", graphBody("over-search", def)); r.status != http.StatusCreated {
		t.Fatalf("a graph over a granted endpoint = %d %s; want 201", r.status, r)
	}
	r := e.call(t, search, http.MethodDelete, "/endpoints/search-endpoint/grants/risk", nil)
	var rv struct {
		BrokenGraphs []string `json:"broken_graphs"`
	}
	if r.status != http.StatusOK || json.Unmarshal(r.body, &rv) != nil || len(rv.BrokenGraphs) != 1 || rv.BrokenGraphs[0] != "over-search" {
		t.Errorf("revoke = %d %s; want broken_graphs [over-search]", r.status, r)
	}
}
