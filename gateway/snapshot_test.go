package gateway_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"modelplane/gateway"
	"modelplane/internal/natstest"
	"modelplane/internal/wait"
	"modelplane/sim/replica"
)

// connectRetrying connects the way `modelplane gateway` does: it returns at
// once even while NATS is down and keeps trying.
func connectRetrying(t *testing.T, url string) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url, append(natstest.ControlPlane(t), nats.RetryOnFailedConnect(true), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

func TestRestartWithNATSDownServesFromSnapshot(t *testing.T) {
	t.Parallel()
	ns := natstest.NewRestartable(t)
	nc := connectRetrying(t, ns.URL())
	e := setupEnv(t, ns.URL(), nc)
	addr := startReplica(t, "v23", replica.TaskClassification)
	e.putRoute(t, route("fraud-scoring", "risk", "classification", 1, ver("v23", 100, addr)))
	e.putRoute(t, route("old-scoring", "risk", "classification", 1, ver("v1", 100, addr)))
	key := e.newKey(t, "risk", "engineer", nil)
	dir := t.TempDir()
	g1 := startGateway(t, nc, gateway.Config{StateDir: dir})
	wait.Eventually(t, 10*time.Second, g1.Ready, "waiting for gateway ready")
	wait.Eventually(t, 10*time.Second, func() bool { return call(t, g1.url, predictPath("old-scoring"), key, predictBody).status == 200 }, "waiting for old-scoring served")
	if err := e.routes.Delete(t.Context(), "old-scoring"); err != nil {
		t.Fatal(err)
	}
	wait.Eventually(t, 10*time.Second, func() bool {
		return call(t, g1.url, predictPath("old-scoring"), key, predictBody).status == http.StatusNotFound
	}, "waiting for old-scoring gone")
	g1.Stop()
	ns.Shutdown()

	// A fresh gateway without a snapshot has nothing to serve.
	cold := startGateway(t, connectRetrying(t, ns.URL()), gateway.Config{})
	if cold.Ready() {
		t.Error("a gateway without NATS or snapshot says it is ready")
	}
	if resp, err := http.Get(cold.url + "/readyz"); err != nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("cold /readyz: %v %v, want 503", resp.StatusCode, err)
	}

	g2 := startGateway(t, connectRetrying(t, ns.URL()), gateway.Config{StateDir: dir})
	if !g2.Ready() {
		t.Fatal("gateway with a snapshot is not ready while NATS is down")
	}
	if resp, err := http.Get(g2.url + "/readyz"); err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("/readyz: %v %v, want 200", resp.StatusCode, err)
	}
	if r := call(t, g2.url, predictPath("fraud-scoring"), key, predictBody); r.status != 200 || r.header.Get("X-Model-Version") != "v23" {
		t.Errorf("fraud-scoring from the snapshot: status %d version %q (%s), want 200 v23", r.status, r.header.Get("X-Model-Version"), r.body)
	}
	if r := call(t, g2.url, predictPath("old-scoring"), key, predictBody); r.status != http.StatusNotFound {
		t.Errorf("endpoint deleted before the outage: status %d, want 404", r.status)
	}

	// NATS comes back with a change: the gateway follows it.
	ns.Restart()
	e.putRoute(t, route("fraud-scoring", "risk", "classification", 2, ver("v24", 100, addr)))
	wait.Eventually(t, 10*time.Second, func() bool {
		return call(t, g2.url, predictPath("fraud-scoring"), key, predictBody).header.Get("X-Model-Version") == "v24"
	}, "waiting for v24 after NATS returns")
}
