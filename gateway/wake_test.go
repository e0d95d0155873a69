package gateway_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"modelplane/busapi"
	"modelplane/gateway"
	"modelplane/internal/wait"
	"modelplane/sim/replica"
)

// TestWakeRequestsAreThrottled: a 202 of an endpoint scaled to zero sends
// one wake request per endpoint per second, however many requests arrive;
// a served request of such an endpoint reminds the control plane at most
// every 10 s; an endpoint with a minimum never sends one.
func TestWakeRequestsAreThrottled(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	zero := route("sleepy", "risk", "classification", 1, ver("v1", 100))
	zero.ScaledToZero = true
	e.putRoute(t, zero)
	addr := startReplica(t, "v1", replica.TaskClassification)
	awake := route("awake", "risk", "classification", 1, ver("v1", 100, addr))
	awake.ScaledToZero = true
	e.putRoute(t, awake)
	e.putRoute(t, route("starting", "risk", "classification", 1, ver("v1", 100)))
	key := e.newKey(t, "risk", "engineer", nil)

	msgs := make(chan *nats.Msg, 100)
	sub, err := e.nc.ChanSubscribe(busapi.WakeWildcard, msgs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := e.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	clk := newClock(t)
	g := startGateway(t, e.nc, gateway.Config{Clock: clk, ID: "gw-test"})
	wait.Eventually(t, 10*time.Second, g.Ready, "waiting for gateway ready")

	calls := func(endpoint string, n, status int) {
		t.Helper()
		for range n {
			if r := call(t, g.url, predictPath(endpoint), key, predictBody); r.status != status {
				t.Fatalf("%s: %d %s, want %d", endpoint, r.status, r.body, status)
			}
		}
	}
	sent := func(want uint64) {
		t.Helper()
		if got := g.Wakes().Sent; got != want {
			t.Fatalf("wake requests sent = %d, want %d", got, want)
		}
	}
	receive := func(endpoint string, served bool) {
		t.Helper()
		select {
		case m := <-msgs:
			var w busapi.Wake
			if err := json.Unmarshal(m.Data, &w); err != nil {
				t.Fatal(err)
			}
			if m.Subject != busapi.WakeSubject(endpoint) || w.Endpoint != endpoint || w.Gateway != "gw-test" || w.Served != served {
				t.Fatalf("wake request %s %+v, want %s for %s served=%v from gw-test", m.Subject, w, busapi.WakeSubject(endpoint), endpoint, served)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no wake request for %s", endpoint)
		}
	}

	calls("starting", 3, http.StatusServiceUnavailable)
	calls("sleepy", 5, http.StatusAccepted)
	sent(1)
	receive("sleepy", false)
	advance(t, clk, 500*time.Millisecond)
	calls("sleepy", 3, http.StatusAccepted)
	sent(1)
	advance(t, clk, 500*time.Millisecond)
	calls("sleepy", 3, http.StatusAccepted)
	sent(2)
	receive("sleepy", false)

	calls("awake", 5, http.StatusOK)
	sent(3)
	receive("awake", true)
	advance(t, clk, 9*time.Second)
	calls("awake", 3, http.StatusOK)
	sent(3)
	advance(t, clk, time.Second)
	calls("awake", 1, http.StatusOK)
	sent(4)
	receive("awake", true)

	select {
	case m := <-msgs:
		t.Fatalf("unexpected wake request on %s: %s", m.Subject, m.Data)
	default:
	}
	if f := g.Wakes().Failed; f != 0 {
		t.Errorf("wake requests refused by NATS = %d, want 0", f)
	}
}
