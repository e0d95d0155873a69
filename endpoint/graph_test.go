package endpoint_test

import (
	"errors"
	"slices"
	"testing"

	"modelplane/endpoint"
	"modelplane/field"
	"modelplane/graph"
)

func call(id, ep string) graph.Vertex {
	return graph.Vertex{ID: id, Type: graph.TypeCall, Endpoint: ep}
}

// TestGraphsUsing: the graphs of a team whose routed versions call an
// endpoint are the ones named; an unrouted version, another team's graph
// and a graph calling something else are not.
func TestGraphsUsing(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := t.Context()
	scoring := f.create(t, "scoring")
	f.create(t, "other")
	for _, g := range []struct {
		name string
		def  graph.Definition
	}{
		{"uses-scoring", graph.Definition{Entry: "s", Nodes: []graph.Vertex{
			{ID: "s", Type: graph.TypeSequence, Steps: []string{"a", "b"}}, call("a", "other"), call("b", "scoring")}}},
		{"uses-other", graph.Definition{Entry: "a", Nodes: []graph.Vertex{call("a", "other")}}},
	} {
		if _, err := f.svc.CreateGraph(ctx, f.riskEng, endpoint.GraphSpec{Name: g.name, Definition: g.def}); err != nil {
			t.Fatal(err)
		}
	}
	// uses-other's unrouted v2 calls scoring: not a dependent until routed.
	if _, err := f.svc.AddGraphVersion(ctx, f.riskEng, "uses-other", "v2", graph.Definition{Entry: "a", Nodes: []graph.Vertex{call("a", "scoring")}}); err != nil {
		t.Fatal(err)
	}
	got, err := f.svc.GraphsUsing(ctx, scoring.ID, "risk")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, []string{"uses-scoring"}) {
		t.Errorf("risk's graphs using scoring = %v; want [uses-scoring]", got)
	}
	if got, _ := f.svc.GraphsUsing(ctx, scoring.ID, "search"); len(got) != 0 {
		t.Errorf("search's graphs using scoring = %v; want none", got)
	}
	// search may not build over risk's endpoint: refused naming the node.
	_, err = f.svc.CreateGraph(ctx, f.searchEng, endpoint.GraphSpec{Name: "search-graph", Definition: graph.Definition{Entry: "x", Nodes: []graph.Vertex{call("x", "scoring")}}})
	var fe field.Errors
	if !errors.As(err, &fe) || len(fe) != 1 || fe[0].Field != "graph.nodes[x]" {
		t.Errorf("search's graph over risk's endpoint: %v; want a 400 on graph.nodes[x]", err)
	}
}
