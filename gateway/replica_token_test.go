package gateway_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"modelplane/busapi"
	"modelplane/gateway"
	"modelplane/internal/wait"
	"modelplane/sim/replica"
)

// TestReplicaAnswersOnlyTheGateway runs a sim replica with its token: a
// request straight to its port is refused, the same request through the
// gateway (which has the token from the routing entry) is served.
func TestReplicaAnswersOnlyTheGateway(t *testing.T) {
	t.Parallel()
	s, err := replica.New(replica.Config{ReplicaID: "r-tok", Token: "tok-r1", Endpoint: "fraud-scoring", Version: "v23",
		Task: replica.TaskClassification, Profile: json.RawMessage(classifierProfile), Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	addr, err := s.Start(t.Context(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	wait.Eventually(t, 10*time.Second, s.Ready, "waiting for replica ready")

	if r := call(t, "http://"+addr.String(), "/predict", "", predictBody); r.status != http.StatusUnauthorized {
		t.Fatalf("straight to the replica = %d (%s), want 401", r.status, r.body)
	}
	// A client that learnt the header's name still lacks the token.
	if r := call(t, "http://"+addr.String(), "/predict", "", predictBody, busapi.ReplicaTokenHeader, "guess"); r.status != http.StatusUnauthorized {
		t.Fatalf("with a guessed token = %d, want 401", r.status)
	}

	e := newEnv(t)
	v := busapi.RouteVersion{Name: "v23", Weight: 100, Replicas: []busapi.RouteReplica{{ID: "r-tok", Addr: addr.String(), Token: "tok-r1"}}}
	e.putRoute(t, route("fraud-scoring", "risk", "classification", 1, v))
	key := e.newKey(t, "risk", "engineer", nil)
	g := startGateway(t, e.nc, gateway.Config{})
	wait.Eventually(t, 10*time.Second, g.Ready, "waiting for gateway ready")
	if r := call(t, g.url, predictPath("fraud-scoring"), key, predictBody); r.status != http.StatusOK {
		t.Fatalf("through the gateway = %d (%s), want 200", r.status, r.body)
	}
}

// TestGatewaySendsTokenAndTeam: the gateway sends each replica its own
// token and the caller's team as authenticated, whatever headers of those
// names the client sent.
func TestGatewaySendsTokenAndTeam(t *testing.T) {
	t.Parallel()
	var (
		mu   sync.Mutex
		seen []http.Header
	)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Clone())
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"predictions":[]}`))
	}))
	t.Cleanup(up.Close)
	e := newEnv(t)
	v := busapi.RouteVersion{Name: "v1", Weight: 100, Replicas: []busapi.RouteReplica{{ID: "r1", Addr: strings.TrimPrefix(up.URL, "http://"), Token: "tok-up"}}}
	e.putRoute(t, route("fraud-scoring", "risk", "classification", 1, v))
	key := e.newKey(t, "risk", "engineer", nil)
	g := startGateway(t, e.nc, gateway.Config{})
	wait.Eventually(t, 10*time.Second, g.Ready, "waiting for gateway ready")
	r := call(t, g.url, predictPath("fraud-scoring"), key, predictBody, busapi.TeamHeader, "search", busapi.ReplicaTokenHeader, "forged")
	if r.status != http.StatusOK {
		t.Fatalf("status %d (%s), want 200", r.status, r.body)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 1 {
		t.Fatalf("upstream saw %d requests, want 1", len(seen))
	}
	h := seen[0]
	if got := h.Values(busapi.TeamHeader); len(got) != 1 || got[0] != "risk" {
		t.Errorf("%s = %q, want only the key's team risk", busapi.TeamHeader, got)
	}
	if got := h.Values(busapi.ReplicaTokenHeader); len(got) != 1 || got[0] != "tok-up" {
		t.Errorf("%s = %q, want only the routing entry's tok-up", busapi.ReplicaTokenHeader, got)
	}
}
