package rollout_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"modelplane/busapi"
	"modelplane/endpoint"
	"modelplane/graph"
	"modelplane/rollout"
)

// TestGraphCanaryRolledBack: a graph endpoint's new version is canaried by
// the same rollout machinery as a model version, without waiting for a
// replica (a graph runs in the gateways), and the judge rolls it back on
// its error rate; the routing entry carries each version's definition.
func TestGraphCanaryRolledBack(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := t.Context()
	eps := endpoint.New(f.pool)
	one := graph.Definition{Entry: "a", Nodes: []graph.Vertex{{ID: "a", Type: graph.TypeCall, Endpoint: "fraud-scoring"}}}
	if _, err := eps.CreateGraph(ctx, f.eng, endpoint.GraphSpec{Name: "fraud-graph", Definition: one}); err != nil {
		t.Fatal(err)
	}
	two := graph.Definition{Entry: "e", Nodes: []graph.Vertex{
		{ID: "e", Type: graph.TypeEnsemble, Steps: []string{"a", "b"}, Combine: graph.CombineMean},
		{ID: "a", Type: graph.TypeCall, Endpoint: "fraud-scoring"},
		{ID: "b", Type: graph.TypeCall, Endpoint: "fraud-scoring", Soft: true, TimeoutMS: 50}}}
	if _, err := eps.AddGraphVersion(ctx, f.eng, "fraud-graph", "v2", two); err != nil {
		t.Fatal(err)
	}
	if _, err := eps.AddGraphVersion(ctx, f.sue, "fraud-graph", "v3", two); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("another team adding a version: %v; want not found", err)
	}
	f.stats.set("v1", window(500, 0, 10))
	f.stats.set("v2", window(500, 50, 10)) // 10 percent errors
	r, err := f.svc.Start(ctx, f.eng, "fraud-graph", rollout.Spec{Version: "v2",
		Steps:              []rollout.Step{{Percent: 10, BakeSeconds: 60}, {Percent: 100, BakeSeconds: 60}},
		EvaluationInterval: 10 * time.Second, EvaluationWindow: time.Minute, Criteria: rollout.CriteriaSpec{MinRequests: u64(100)}})
	if err != nil {
		t.Fatal(err)
	}
	f.pass(t)
	if got := f.get(t, r.ID); got.State != rollout.StateProgressing {
		t.Fatalf("after the first pass: %s (%s); want progressing with no replica to wait for", got.State, got.Reason)
	}
	if w := f.published(t, "fraud-graph"); w["v2"] == 0 || w["v1"]+w["v2"] != 100 {
		t.Fatalf("published weights %v; want the canary's first step", w)
	}
	f.clock.Advance(10 * time.Second)
	f.pass(t)
	got := f.get(t, r.ID)
	if got.State != rollout.StateRolledBack || !strings.Contains(got.Reason, "error_rate") {
		t.Fatalf("state %s reason %q; want rolled back by the judge on the error rate", got.State, got.Reason)
	}
	if w := f.weights(t, "fraud-graph"); !equal(w, map[string]float64{"v1": 100, "v2": 0}) {
		t.Fatalf("weights %v; want all on v1", w)
	}
	var payload []byte
	if err := f.pool.QueryRow(ctx, `SELECT payload FROM outbox WHERE subject = $1 ORDER BY id DESC LIMIT 1`,
		busapi.KVSubject(busapi.BucketRoutes, "fraud-graph")).Scan(&payload); err != nil {
		t.Fatal(err)
	}
	var rt busapi.Route
	if err := json.Unmarshal(payload, &rt); err != nil {
		t.Fatal(err)
	}
	if rt.Task != busapi.RouteTaskGraph || len(rt.Versions) != 2 {
		t.Fatalf("routing entry %s; want a graph entry with both versions", payload)
	}
	for _, v := range rt.Versions {
		d, err := graph.Parse(v.Graph)
		if err != nil || len(v.Replicas) != 0 {
			t.Errorf("version %s: graph %s (%v), %d replicas; want its definition and none", v.Name, v.Graph, err, len(v.Replicas))
			continue
		}
		if want := map[string]string{"v1": "a", "v2": "e"}[v.Name]; d.Entry != want {
			t.Errorf("version %s enters at %q; want %q", v.Name, d.Entry, want)
		}
	}
}
