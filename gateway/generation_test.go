package gateway_test

import (
	"net/http"
	"testing"
	"time"

	"modelplane/gateway"
	"modelplane/internal/wait"
	"modelplane/sim/replica"
)

// TestRouteGeneration: RouteGeneration reports the generation the gateway
// serves an endpoint from, ignores a stale entry, and once it reports a
// rollback (the candidate at weight 0) no request reaches the candidate.
func TestRouteGeneration(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	key := e.newKey(t, "risk", "engineer", nil)
	v42, v43 := startReplica(t, "v42", replica.TaskClassification), startReplica(t, "v43", replica.TaskClassification)
	g := startGateway(t, e.nc, gateway.Config{})
	wait.Eventually(t, 10*time.Second, g.Ready, "waiting for gateway ready")
	if gen, ok := g.RouteGeneration("fraud-scoring"); ok {
		t.Fatalf("RouteGeneration before any entry = %d, true; want false", gen)
	}
	gen := func() int64 { n, _ := g.RouteGeneration("fraud-scoring"); return n }

	e.putRoute(t, route("fraud-scoring", "risk", "classification", 3, ver("v42", 50, v42), ver("v43", 50, v43)))
	wait.Eventually(t, 10*time.Second, func() bool { return gen() == 3 }, "waiting for generation 3")
	e.putRoute(t, route("fraud-scoring", "risk", "classification", 4, ver("v42", 100, v42), ver("v43", 0, v43)))
	wait.Eventually(t, 10*time.Second, func() bool { return gen() == 4 }, "waiting for generation 4")
	// Generation 2 arrives after 4 is held; the barrier entry, put after
	// it, shows the watch has delivered it.
	e.putRoute(t, route("fraud-scoring", "risk", "classification", 2, ver("v42", 0, v42), ver("v43", 100, v43)))
	e.putRoute(t, route("barrier", "risk", "classification", 1, ver("v42", 100, v42)))
	wait.Eventually(t, 10*time.Second, func() bool { _, ok := g.RouteGeneration("barrier"); return ok }, "waiting for barrier")
	for i := range 50 {
		r := call(t, g.url, predictPath("fraud-scoring"), key, predictBody)
		if r.status != http.StatusOK || r.header.Get("X-Model-Version") != "v42" {
			t.Fatalf("request %d after the rollback: status %d, version %q; want 200 from v42", i, r.status, r.header.Get("X-Model-Version"))
		}
	}
	if got := gen(); got != 4 {
		t.Errorf("RouteGeneration = %d; want 4 (the stale generation 2 ignored)", got)
	}
}
