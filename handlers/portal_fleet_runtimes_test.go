package handlers

import (
	"context"
	"net/http"
	"testing"

	"modelplane/busapi"
)

// TestNodePageShowsTheRuntimesTheNodeReports: the node page says which
// runtime catalogue entries the node runs, every runtime for a simulated
// node, and "not reported" for an agent that does not say (which
// placement does not filter).
func TestNodePageShowsTheRuntimesTheNodeReports(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	admin := portalSignIn(t, e, "admin@example.com")
	for _, tt := range []struct {
		node     string
		runtimes []string
		want     string
	}{
		{"cpu-rt-1", []string{"builtin", "llama-server"}, "builtin, llama-server"},
		{"cpu-rt-2", []string{busapi.AnyRuntime}, "every runtime (simulated)"},
		{"cpu-rt-3", []string{}, "none"},
		{"cpu-rt-4", nil, "not reported"},
	} {
		if _, err := e.srv.Fleet.Observe(context.Background(), busapi.NodeStatus{Node: tt.node, BootID: "b1", LeaseSeconds: 15,
			CPUCores: 4, MemoryMB: 4096, Runtimes: tt.runtimes}); err != nil {
			t.Fatal(err)
		}
		page := admin.get("/fleet/" + tt.node)
		if page.StatusCode != http.StatusOK {
			t.Fatalf("GET /fleet/%s = %d\n%s", tt.node, page.StatusCode, page.Body)
		}
		if got := portalText(page.doc(t).Find("#node-summary .runtimes")); got != tt.want {
			t.Errorf("node %s runtimes = %q, want %q", tt.node, got, tt.want)
		}
	}
}
