package gateway_test

import (
	"net/http"
	"testing"
	"time"

	"modelplane/gateway"
	"modelplane/internal/wait"
)

// TestPinOnlyToServingVersions checks the X-Model-Version pin: it reaches a
// version that takes traffic (weight > 0, or an experiment arm), or a
// shadow when the caller says so with X-Model-Version-Shadow: true; a
// weight-0 version (a rollout's candidate before its first step, one being
// drained) answers 404 like an unknown one. Pinned requests are counted in
// their own statistics series, marked Pinned, so a caller cannot steer a
// rollout's judge by pinning requests to the candidate or its baseline.
func TestPinOnlyToServingVersions(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	addr := primaryServer(t)
	e.putRoute(t, route("fraud-scoring", "risk", "classification", 1,
		ver("stable", 100, addr), ver("dormant", 0, addr), shadowOf("shadowed", 1e-9, addr)))
	key := e.newKey(t, "risk", "engineer", nil)
	clk := newClock(t)
	g := startGateway(t, e.nc, gateway.Config{ID: "gw-pin", Clock: clk})
	wait.Eventually(t, 10*time.Second, g.Ready, "waiting for gateway ready")

	for _, c := range []struct {
		name string
		hdr  []string
		want int
	}{
		{"unpinned", nil, http.StatusOK},
		{"unpinned", nil, http.StatusOK},
		{"unpinned", nil, http.StatusOK},
		{"pin to stable", []string{"X-Model-Version", "stable"}, http.StatusOK},
		{"pin to stable", []string{"X-Model-Version", "stable"}, http.StatusOK},
		{"pin to a weight-0 version", []string{"X-Model-Version", "dormant"}, http.StatusNotFound},
		{"pin to a weight-0 version with the shadow flag", []string{"X-Model-Version", "dormant", "X-Model-Version-Shadow", "true"}, http.StatusNotFound},
		{"pin to a shadow without the flag", []string{"X-Model-Version", "shadowed"}, http.StatusNotFound},
		{"pin to a shadow with the flag", []string{"X-Model-Version", "shadowed", "X-Model-Version-Shadow", "true"}, http.StatusOK},
	} {
		if r := call(t, g.url, predictPath("fraud-scoring"), key, predictBody, c.hdr...); r.status != c.want {
			t.Errorf("%s: status %d, want %d", c.name, r.status, c.want)
		}
	}

	wait.Eventually(t, 10*time.Second, func() bool { return g.Stats().Pending == 6 }, "waiting for 6 requests counted")
	advance(t, clk, gateway.DefaultStatsInterval)
	wait.Eventually(t, 10*time.Second, func() bool { return g.Stats().Published == 3 }, "waiting for 3 series published")

	type series struct {
		version string
		pinned  bool
	}
	got, ids := map[series]uint64{}, map[string]bool{}
	for _, m := range publishedStats(t, e.nc, 3) {
		got[series{m.Version, m.Pinned}] += m.Count
		if ids[m.ID] {
			t.Errorf("two series share the id %q; the ingest would store one", m.ID)
		}
		ids[m.ID] = true
	}
	want := map[series]uint64{{"stable", false}: 3, {"stable", true}: 2, {"shadowed", true}: 1}
	for k, n := range want {
		if got[k] != n {
			t.Errorf("%s pinned=%v counted %d requests, want %d (all: %v)", k.version, k.pinned, got[k], n, got)
		}
	}
}

// TestStatsCarryEndpointID checks that the statistics of an endpoint carry
// the id of its routing entry, so that an endpoint deleted and created again
// under the same name (perhaps by another team) is another series in
// ClickHouse, never the old one's.
func TestStatsCarryEndpointID(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rt := route("fraud-scoring", "risk", "classification", 1, ver("stable", 100, primaryServer(t)))
	rt.EndpointID = 42
	e.putRoute(t, rt)
	key := e.newKey(t, "risk", "engineer", nil)
	clk := newClock(t)
	g := startGateway(t, e.nc, gateway.Config{ID: "gw-id", Clock: clk})
	wait.Eventually(t, 10*time.Second, g.Ready, "waiting for gateway ready")
	if r := call(t, g.url, predictPath("fraud-scoring"), key, predictBody); r.status != http.StatusOK {
		t.Fatalf("predict = %d", r.status)
	}
	wait.Eventually(t, 10*time.Second, func() bool { return g.Stats().Pending == 1 }, "waiting for the request counted")
	advance(t, clk, gateway.DefaultStatsInterval)
	wait.Eventually(t, 10*time.Second, func() bool { return g.Stats().Published == 1 }, "waiting for statistics published")
	m := publishedStats(t, e.nc, 1)[0]
	if m.EndpointID != 42 {
		t.Errorf("statistics carry endpoint id %d, want the entry's 42", m.EndpointID)
	}
}
