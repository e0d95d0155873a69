package gateway_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"modelplane/busapi"
	"modelplane/gateway"
	"modelplane/internal/wait"
	"modelplane/sim/replica"
)

// zeroRoute is a routing entry of an endpoint scaled to zero with no
// replica of its one version v1, a cold-start budget and v1's measured cold
// start (0: never measured).
func zeroRoute(endpoint string, gen int64, budgetS int, coldMS int64, addrs ...string) busapi.Route {
	rt := route(endpoint, "risk", "classification", gen, ver("v1", 100, addrs...))
	rt.ScaledToZero, rt.ColdStartBudgetS = true, budgetS
	rt.Versions[0].ColdStartMS = coldMS
	return rt
}

// asyncCall is call run on its own goroutine, cancelled with ctx; err is
// set when no answer came.
type asyncResult struct {
	result
	err error
}

func callAsync(ctx context.Context, base, path, key, body string) <-chan asyncResult {
	out := make(chan asyncResult, 1)
	go func() {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+path, strings.NewReader(body))
		if err != nil {
			out <- asyncResult{err: err}
			return
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			out <- asyncResult{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		out <- asyncResult{result: result{status: resp.StatusCode, header: resp.Header, body: b}, err: err}
	}()
	return out
}

// answer waits for an async call's answer.
func answer(t *testing.T, ch <-chan asyncResult) result {
	t.Helper()
	r := wait.Receive(t, 10*time.Second, ch, "no answer to the held request")
	if r.err != nil {
		t.Fatalf("held request: %v", r.err)
	}
	return r.result
}

// holding waits until the gateway holds n requests.
func holding(t *testing.T, g *gw, n int64) {
	t.Helper()
	wait.Eventually(t, 10*time.Second, func() bool { return g.Holds().Waiting == n }, "waiting for held requests")
}

// TestScaleFromZeroServedWithinBudget: a request to an endpoint scaled to
// zero is held, not answered 202, and its wake request goes out; a routing
// update without a replica keeps it held; once the replica appears in the
// routing table, 29 s into a 30 s budget, the request is proxied and
// answered 200, and the wait is in the scale-from-zero histogram.
func TestScaleFromZeroServedWithinBudget(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.putRoute(t, zeroRoute("sleepy", 1, 30, 0))
	key := e.newKey(t, "risk", "engineer", nil)
	wakes := make(chan *nats.Msg, 100)
	sub, err := e.nc.ChanSubscribe(busapi.WakeSubject("sleepy"), wakes)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := e.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	clk := newClock(t)
	g := startGateway(t, e.nc, gateway.Config{Clock: clk, ID: "gw-hold"})
	wait.Eventually(t, 10*time.Second, g.Ready, "waiting for gateway ready")

	res := callAsync(t.Context(), g.url, predictPath("sleepy"), key, predictBody)
	holding(t, g, 1)
	m := wait.Receive(t, 10*time.Second, wakes, "no wake request for the held request")
	var w busapi.Wake
	if err := json.Unmarshal(m.Data, &w); err != nil || w.Endpoint != "sleepy" || w.Served {
		t.Fatalf("wake request %s (%v), want one for sleepy, not served", m.Data, err)
	}
	// Another version's weight changes, no replica yet: still held.
	e.putRoute(t, zeroRoute("sleepy", 2, 30, 0))
	wait.Eventually(t, 10*time.Second, func() bool { gen, _ := g.RouteGeneration("sleepy"); return gen == 2 }, "waiting for generation 2")
	advance(t, clk, 29*time.Second)
	if h := g.Holds(); h.Waiting != 1 || h.Expired != 0 {
		t.Fatalf("holds after 29 s = %+v, want the request still held", h)
	}

	addr := startReplica(t, "v1", replica.TaskClassification)
	e.putRoute(t, zeroRoute("sleepy", 3, 30, 0, addr))
	r := answer(t, res)
	if r.status != http.StatusOK || r.header.Get("X-Model-Version") != "v1" || !strings.Contains(string(r.body), "predictions") {
		t.Fatalf("held request = %d %s (version %q), want 200 with v1's predictions", r.status, r.body, r.header.Get("X-Model-Version"))
	}
	if h := g.Holds(); h != (gateway.HoldCounters{Served: 1}) {
		t.Errorf("holds = %+v, want one served and none waiting", h)
	}
	if n := metricValue(t, g.adminURL, `ml_serving_scale_from_zero_wait_seconds_count{endpoint="sleepy",outcome="served"}`); n != 1 {
		t.Errorf("served waits counted = %v, want 1", n)
	}
	if s := metricValue(t, g.adminURL, `ml_serving_scale_from_zero_wait_seconds_sum{endpoint="sleepy",outcome="served"}`); s != 29 {
		t.Errorf("served wait = %v s, want 29 s (the gateway's clock)", s)
	}
	// With the replica in the table the next request is not held.
	if r := call(t, g.url, predictPath("sleepy"), key, predictBody); r.status != http.StatusOK {
		t.Errorf("next request = %d %s, want 200", r.status, r.body)
	}
}

// TestScaleFromZero202PastBudget: a request held for the whole budget gets
// 202 with a Retry-After of what remains of the version's measured cold
// start (45 s measured, 30 s waited: 15 s); a version never measured gets
// the gateway's Retry-After; an entry without a budget (an older control
// plane) gets 202 at once.
func TestScaleFromZero202PastBudget(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.putRoute(t, zeroRoute("slow", 1, 30, 45_000))
	e.putRoute(t, zeroRoute("unmeasured", 1, 30, 0))
	e.putRoute(t, zeroRoute("nobudget", 1, 0, 45_000))
	key := e.newKey(t, "risk", "engineer", nil)
	clk := newClock(t)
	g := startGateway(t, e.nc, gateway.Config{Clock: clk, RetryAfter: 2 * time.Second})
	wait.Eventually(t, 10*time.Second, g.Ready, "waiting for gateway ready")

	if r := call(t, g.url, predictPath("nobudget"), key, predictBody); r.status != http.StatusAccepted || r.header.Get("Retry-After") != "45" {
		t.Fatalf("no budget: %d Retry-After %q, want 202 at once with 45 (the measured cold start)", r.status, r.header.Get("Retry-After"))
	}
	slow := callAsync(t.Context(), g.url, predictPath("slow"), key, predictBody)
	unmeasured := callAsync(t.Context(), g.url, predictPath("unmeasured"), key, predictBody)
	holding(t, g, 2)
	advance(t, clk, 30*time.Second)
	for _, c := range []struct {
		name  string
		ch    <-chan asyncResult
		retry string
	}{{"slow", slow, "15"}, {"unmeasured", unmeasured, "2"}} {
		r := answer(t, c.ch)
		if r.status != http.StatusAccepted || r.header.Get("Retry-After") != c.retry {
			t.Errorf("%s past the budget: %d %s, Retry-After %q; want 202 with %s", c.name, r.status, r.body, r.header.Get("Retry-After"), c.retry)
		}
	}
	if h := g.Holds(); h != (gateway.HoldCounters{Expired: 2}) {
		t.Errorf("holds = %+v, want two expired and none waiting", h)
	}
	if s := metricValue(t, g.adminURL, `ml_serving_scale_from_zero_wait_seconds_sum{endpoint="slow",outcome="expired"}`); s != 30 {
		t.Errorf("expired wait = %v s, want 30 s", s)
	}
}

// TestScaleFromZeroQueueFull: with the endpoint's hold queue full, the next
// request gets 202 at once, its Retry-After the whole measured cold start;
// the held ones are served when the replica appears.
func TestScaleFromZeroQueueFull(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.putRoute(t, zeroRoute("busy", 1, 120, 40_500))
	key := e.newKey(t, "risk", "engineer", nil)
	clk := newClock(t)
	g := startGateway(t, e.nc, gateway.Config{Clock: clk, HoldQueue: 2})
	wait.Eventually(t, 10*time.Second, g.Ready, "waiting for gateway ready")

	first := callAsync(t.Context(), g.url, predictPath("busy"), key, predictBody)
	second := callAsync(t.Context(), g.url, predictPath("busy"), key, predictBody)
	holding(t, g, 2)
	if r := call(t, g.url, predictPath("busy"), key, predictBody); r.status != http.StatusAccepted || r.header.Get("Retry-After") != "41" {
		t.Fatalf("third request = %d %s, Retry-After %q; want 202 at once with 41 (40.5 s measured, rounded up)", r.status, r.body, r.header.Get("Retry-After"))
	}
	if n := metricValue(t, g.adminURL, "ml_serving_scale_from_zero_queue_full_total"); n != 1 {
		t.Errorf("queue-full 202s = %v, want 1", n)
	}
	addr := startReplica(t, "v1", replica.TaskClassification)
	e.putRoute(t, zeroRoute("busy", 2, 120, 40_500, addr))
	for _, ch := range []<-chan asyncResult{first, second} {
		if r := answer(t, ch); r.status != http.StatusOK {
			t.Errorf("held request = %d %s, want 200", r.status, r.body)
		}
	}
	if h := g.Holds(); h != (gateway.HoldCounters{Served: 2, Full: 1}) {
		t.Errorf("holds = %+v, want two served, one turned away", h)
	}
}

// TestScaleFromZeroCancelledFreesSlot: a caller that goes away while held
// leaves the queue at once, without the clock moving, so the next request
// takes its slot (a queue of one) and is held, not turned away.
func TestScaleFromZeroCancelledFreesSlot(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.putRoute(t, zeroRoute("fickle", 1, 30, 0))
	key := e.newKey(t, "risk", "engineer", nil)
	clk := newClock(t)
	g := startGateway(t, e.nc, gateway.Config{Clock: clk, HoldQueue: 1})
	wait.Eventually(t, 10*time.Second, g.Ready, "waiting for gateway ready")

	ctx, cancel := context.WithCancel(t.Context())
	gone := callAsync(ctx, g.url, predictPath("fickle"), key, predictBody)
	holding(t, g, 1)
	cancel()
	if r := <-gone; r.err == nil {
		t.Fatalf("cancelled request answered %d", r.status)
	}
	wait.Eventually(t, 10*time.Second, func() bool { h := g.Holds(); return h.Waiting == 0 && h.Left == 1 }, "waiting for the cancelled request to leave")

	next := callAsync(t.Context(), g.url, predictPath("fickle"), key, predictBody)
	holding(t, g, 1)
	addr := startReplica(t, "v1", replica.TaskClassification)
	e.putRoute(t, zeroRoute("fickle", 2, 30, 0, addr))
	if r := answer(t, next); r.status != http.StatusOK {
		t.Fatalf("request after the cancelled one = %d %s, want 200", r.status, r.body)
	}
	if h := g.Holds(); h != (gateway.HoldCounters{Served: 1, Left: 1}) {
		t.Errorf("holds = %+v, want one left, one served, none turned away", h)
	}
}

// TestScaleFromZeroBlockedWhileHeld: a blocking budget that reaches the
// routing entry while a request is held ends the hold at once with the 503
// naming the budget: no replica will start, so waiting out the budget would
// be in vain.
func TestScaleFromZeroBlockedWhileHeld(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.putRoute(t, zeroRoute("broke", 1, 30, 0))
	key := e.newKey(t, "risk", "engineer", nil)
	g := startGateway(t, e.nc, gateway.Config{Clock: newClock(t)})
	wait.Eventually(t, 10*time.Second, g.Ready, "waiting for gateway ready")

	res := callAsync(t.Context(), g.url, predictPath("broke"), key, predictBody)
	holding(t, g, 1)
	blocked := zeroRoute("broke", 2, 30, 0)
	blocked.Blocked = "budget exceeded: team risk spent $10.00 of its $10.00 monthly budget (enforcement block)"
	e.putRoute(t, blocked)
	if r := answer(t, res); r.status != http.StatusServiceUnavailable || !strings.Contains(string(r.body), "budget exceeded") {
		t.Fatalf("held request after the block = %d %s, want 503 naming the budget", r.status, r.body)
	}
	if h := g.Holds(); h.Waiting != 0 || h.Served+h.Expired+h.Full+h.Left != 0 {
		t.Errorf("holds = %+v, want none waiting and none counted", h)
	}
}
