package handlers

import (
	"fmt"
	"testing"

	"modelplane/registry"
)

// TestLineageGraphIsReadable: a long chain of versions (the demo's v1 to
// v24) is one row per version down the page, not a strip squeezed into a
// thumbnail: the graph is sized to its content, narrow enough for the page
// at its natural size, every label beside its own row; a branch takes a
// lane of its own.
func TestLineageGraphIsReadable(t *testing.T) {
	t.Parallel()
	var vs []registry.Version
	var edges []registry.LineageEdge
	for i := 1; i <= 24; i++ {
		vs = append(vs, registry.Version{VersionSpec: registry.VersionSpec{Name: fmt.Sprintf("v%d", i)}})
		if i > 1 {
			edges = append(edges, registry.LineageEdge{Parent: fmt.Sprintf("v%d", i-1), Child: fmt.Sprintf("v%d", i)})
		}
	}
	vs = append(vs, registry.Version{VersionSpec: registry.VersionSpec{Name: "v23-retrained-cpu"}})
	edges = append(edges, registry.LineageEdge{Parent: "v22", Child: "v23-retrained-cpu"})

	g := lineageGraph(vs, edges)
	if g.Width > 1000 || g.Width < 20+2*lineageLane+len("v23-retrained-cpu")*lineageChar {
		t.Errorf("width = %d, want room for 2 lanes and the longest label, and under the page's 1000 px", g.Width)
	}
	if want := 20 + 25*lineageRow; g.Height != want {
		t.Errorf("height = %d, want %d (one row per version)", g.Height, want)
	}
	lanes := map[int]int{}
	for i, n := range g.Nodes {
		if n.Y != 20+i*lineageRow || n.LabelX <= n.X {
			t.Errorf("%s at (%d, %d), label at %d: want row %d with the label to its right", n.Name, n.X, n.Y, n.LabelX, i)
		}
		lanes[n.X]++
	}
	if len(lanes) != 2 || lanes[20] != 24 {
		t.Errorf("lanes %v, want the chain on one lane and the branch on another", lanes)
	}
	if len(g.Links) != len(edges) {
		t.Errorf("%d links, want %d", len(g.Links), len(edges))
	}
}
