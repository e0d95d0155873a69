package gateway_test

import (
	"bufio"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"modelplane/busapi"
	"modelplane/gateway"
	"modelplane/internal/wait"
)

// serveVia sends one prediction through the gateway's handler in process.
func serveVia(t *testing.T, h http.Handler, endpoint, key string, hdr ...string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequestWithContext(t.Context(), http.MethodPost, predictPath(endpoint), strings.NewReader(predictBody))
	req.Header.Set("Authorization", "Bearer "+key)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w
}

// TestVersionChoiceOrder: a pin wins over the experiment and the split (an
// unknown pin is 404); a caller with X-User-Id keeps its experiment arm; a
// caller without one gets the weighted split; the arms' shares hold end to
// end.
func TestVersionChoiceOrder(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rt := route("fraud-scoring", "risk", "classification", 1, ver("stable", 100, "10.0.0.1:1"), ver("canary", 0, "10.0.0.2:1"))
	rt.Experiment = &busapi.RouteExperiment{Name: "ab-1", Arms: []busapi.RouteArm{{Version: "stable", Share: 70}, {Version: "canary", Share: 30}}}
	e.putRoute(t, rt)
	key := e.newKey(t, "risk", "engineer", nil)
	g := startGateway(t, e.nc, gateway.Config{Transport: instant{}})
	wait.Eventually(t, 10*time.Second, g.Ready, "waiting for gateway ready")
	h := g.Handler()

	for i := range 200 {
		u := "user-" + strconv.Itoa(i)
		if w := serveVia(t, h, "fraud-scoring", key, "X-Model-Version", "canary", "X-User-Id", u); w.Code != 200 || w.Header().Get("X-Model-Version") != "canary" {
			t.Fatalf("pinned canary for %s: %d %q, want 200 from canary", u, w.Code, w.Header().Get("X-Model-Version"))
		}
		if w := serveVia(t, h, "fraud-scoring", key); w.Header().Get("X-Model-Version") != "stable" {
			t.Fatalf("no user id: version %q, want the split's stable (100%%)", w.Header().Get("X-Model-Version"))
		}
	}
	if w := serveVia(t, h, "fraud-scoring", key, "X-Model-Version", "v9", "X-User-Id", "u"); w.Code != http.StatusNotFound {
		t.Errorf("unknown pin: status %d, want 404", w.Code)
	}
	const users = 4000
	canary := 0
	for i := range users {
		u := "user-" + strconv.Itoa(i)
		first := serveVia(t, h, "fraud-scoring", key, "X-User-Id", u).Header().Get("X-Model-Version")
		if again := serveVia(t, h, "fraud-scoring", key, "X-User-Id", u).Header().Get("X-Model-Version"); again != first {
			t.Fatalf("user %s got %s then %s, want the same arm", u, first, again)
		}
		if first == "canary" {
			canary++
		}
	}
	mean, sd := users*0.3, math.Sqrt(users*0.3*0.7)
	if d := math.Abs(float64(canary) - mean); d > 5*sd {
		t.Errorf("canary arm got %d of %d users, want %.0f ± %.0f", canary, users, mean, 5*sd)
	}
}

// TestEndpointOwnRateLimit: an endpoint with a rate limit of its own gets
// 429 with Retry-After at that limit, although the gateway's default is
// unlimited; another endpoint is not limited.
func TestEndpointOwnRateLimit(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	limited := route("fraud-scoring", "risk", "classification", 1, ver("v1", 100, "10.0.0.1:1"))
	limited.RateLimitRPS, limited.RateLimitBurst = 0.5, 3
	e.putRoute(t, limited)
	e.putRoute(t, route("free", "risk", "classification", 1, ver("v1", 100, "10.0.0.1:1")))
	key := e.newKey(t, "risk", "engineer", nil)
	// The clock stands still: no token comes back during the test.
	g := startGateway(t, e.nc, gateway.Config{Transport: instant{}, Clock: newClock(t)})
	wait.Eventually(t, 10*time.Second, g.Ready, "waiting for gateway ready")
	h := g.Handler()
	for i := range 3 {
		if w := serveVia(t, h, "fraud-scoring", key); w.Code != 200 {
			t.Fatalf("request %d within the burst: %d, want 200", i, w.Code)
		}
	}
	w := serveVia(t, h, "fraud-scoring", key)
	if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != "2" {
		t.Errorf("over the endpoint's limit: %d Retry-After %q, want 429 with 2 (one token per 2 s)", w.Code, w.Header().Get("Retry-After"))
	}
	for i := range 20 {
		if w := serveVia(t, h, "free", key); w.Code != 200 {
			t.Fatalf("endpoint without a limit, request %d: %d, want 200", i, w.Code)
		}
	}
}

// TestEndpointOwnTimeout: a replica slower than the endpoint's timeout is
// cut at it with 504, although the gateway's default is a minute.
func TestEndpointOwnTimeout(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Reading the body lets the server notice the gateway hanging up.
		_, _ = io.Copy(io.Discard, r.Body)
		select {
		case <-r.Context().Done():
		case <-time.After(30 * time.Second):
		}
	}))
	t.Cleanup(slow.Close)
	rt := route("fraud-scoring", "risk", "classification", 1, ver("v1", 100, strings.TrimPrefix(slow.URL, "http://")))
	rt.TimeoutMS = 150
	e.putRoute(t, rt)
	key := e.newKey(t, "risk", "engineer", nil)
	g := startGateway(t, e.nc, gateway.Config{Timeout: time.Minute})
	wait.Eventually(t, 10*time.Second, g.Ready, "waiting for gateway ready")
	// The answer names the timeout that cut the call: the endpoint's
	// 150ms, not the gateway's minute (which would also hold the test a
	// minute).
	r := call(t, g.url, predictPath("fraud-scoring"), key, predictBody)
	if r.status != http.StatusGatewayTimeout || !strings.Contains(string(r.body), "150ms") {
		t.Errorf("slow replica: %d %s, want 504 naming the endpoint's 150ms", r.status, r.body)
	}
}

// dialCounter counts the calls per replica address on a real transport.
type dialCounter struct {
	next  http.RoundTripper
	calls map[string]*atomic.Int64
}

func (d *dialCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	if c := d.calls[r.URL.Host]; c != nil {
		c.Add(1)
	}
	return d.next.RoundTrip(r)
}

// metricValue reads one unlabelled series from the gateway's admin /metrics.
func metricValue(t *testing.T, base, name string) float64 {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	t.Fatalf("metric %s not found", name)
	return 0
}

// TestPassiveEjection: a replica that cannot be connected to, or answers
// 502/503/504, EjectFailures times in a row is skipped for the cool-down; a
// replica answering 500 (the model refusing an input) is not; the last
// usable replica of a version is never ejected; after the cool-down an
// ejected replica is tried again.
func TestPassiveEjection(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	good := primaryServer(t)
	broken := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		http.Error(w, "broken", http.StatusServiceUnavailable)
	}))
	t.Cleanup(broken.Close)
	brokenAddr := strings.TrimPrefix(broken.URL, "http://")
	refusing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		http.Error(w, "cannot score this input", http.StatusInternalServerError)
	}))
	t.Cleanup(refusing.Close)
	refusingAddr := strings.TrimPrefix(refusing.URL, "http://")
	dead, deadA, deadB := deadAddr(t), deadAddr(t), deadAddr(t)
	e.putRoute(t, route("dial", "risk", "classification", 1, ver("v1", 100, good, dead)))
	e.putRoute(t, route("fivexx", "risk", "classification", 1, ver("v1", 100, good, brokenAddr)))
	e.putRoute(t, route("all-dead", "risk", "classification", 1, ver("v1", 100, deadA, deadB)))
	e.putRoute(t, route("model500", "risk", "classification", 1, ver("v1", 100, primaryServer(t), refusingAddr)))
	key := e.newKey(t, "risk", "engineer", nil)
	counter := &dialCounter{next: gateway.NewTransport(), calls: map[string]*atomic.Int64{}}
	for _, a := range []string{dead, brokenAddr, deadA, deadB, refusingAddr} {
		counter.calls[a] = &atomic.Int64{}
	}
	clk := newClock(t)
	g := startGateway(t, e.nc, gateway.Config{Transport: counter, EjectFailures: 3, EjectCooldown: time.Hour, Clock: clk,
		StatsInterval: 2 * time.Hour}) // no statistics window ends on the way
	wait.Eventually(t, 10*time.Second, g.Ready, "waiting for gateway ready")

	for i := range 40 {
		if r := call(t, g.url, predictPath("dial"), key, predictBody); r.status != http.StatusOK {
			t.Fatalf("dial request %d: %d, want 200 (a refused connection is retried on the good replica)", i, r.status)
		}
	}
	if n := counter.calls[dead].Load(); n != 3 {
		t.Errorf("calls to the dead replica = %d, want 3: ejected after the third failure", n)
	}
	fivexx := 0
	for range 40 {
		if r := call(t, g.url, predictPath("fivexx"), key, predictBody); r.status == http.StatusServiceUnavailable {
			fivexx++
		}
	}
	if n := counter.calls[brokenAddr].Load(); n != 3 || fivexx != 3 {
		t.Errorf("calls to the 503 replica = %d (%d callers got 503), want 3: ejected after the third", n, fivexx)
	}
	for range 40 {
		call(t, g.url, predictPath("model500"), key, predictBody)
	}
	if n := counter.calls[refusingAddr].Load(); n <= 3 {
		t.Errorf("calls to the replica answering 500 = %d, want more than 3: a model's 500 must not eject it", n)
	}
	for range 20 {
		if r := call(t, g.url, predictPath("all-dead"), key, predictBody); r.status != http.StatusServiceUnavailable {
			t.Fatalf("all-dead: %d, want 503", r.status)
		}
	}
	// One ejection per endpoint: in all-dead, after the first of its two
	// replicas is ejected the other is the version's last, and 20 failures
	// in a row do not eject it.
	if got := metricValue(t, g.adminURL, "ml_serving_replica_ejections_total"); got != 3 {
		t.Errorf("ml_serving_replica_ejections_total = %v, want 3 (one per endpoint, never the last replica)", got)
	}
	if a, b := counter.calls[deadA].Load(), counter.calls[deadB].Load(); a < 20 || b < 20 {
		t.Errorf("calls to the all-dead replicas = %d and %d, want both still tried (the ejected one as the last resort of the retry)", a, b)
	}

	// A second short of the cool-down the dead replica is still skipped;
	// at its end it is tried again, and ejected again after three more
	// failures.
	advance(t, clk, time.Hour-time.Second)
	for range 10 {
		call(t, g.url, predictPath("dial"), key, predictBody)
	}
	if n := counter.calls[dead].Load(); n != 3 {
		t.Errorf("calls to the dead replica during its cool-down = %d, want still 3", n)
	}
	advance(t, clk, time.Second)
	for i := range 40 {
		if r := call(t, g.url, predictPath("dial"), key, predictBody); r.status != http.StatusOK {
			t.Fatalf("dial request %d after the cool-down: %d, want 200", i, r.status)
		}
	}
	if n := counter.calls[dead].Load(); n != 6 {
		t.Errorf("calls to the dead replica after its cool-down = %d, want 6: tried again, ejected after three more failures", n)
	}
}

// TestScaledToZeroAnswers202: an endpoint scaled to zero with no ready
// replica answers 202 with Retry-After and a problem body; one that is not
// scaled to zero answers 503.
func TestScaledToZeroAnswers202(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	zero := route("sleepy", "risk", "classification", 1, ver("v1", 100))
	zero.ScaledToZero = true
	e.putRoute(t, zero)
	e.putRoute(t, route("starting", "risk", "classification", 1, ver("v1", 100)))
	key := e.newKey(t, "risk", "engineer", nil)
	g := startGateway(t, e.nc, gateway.Config{RetryAfter: 5 * time.Second})
	wait.Eventually(t, 10*time.Second, g.Ready, "waiting for gateway ready")
	r := call(t, g.url, predictPath("sleepy"), key, predictBody)
	if r.status != http.StatusAccepted || r.header.Get("Retry-After") != "5" ||
		r.header.Get("Content-Type") != "application/problem+json" || !strings.Contains(string(r.body), "scaled to zero") {
		t.Errorf("scaled to zero: %d Retry-After %q %s %s, want 202, 5 and a problem body", r.status, r.header.Get("Retry-After"), r.header.Get("Content-Type"), r.body)
	}
	if r := call(t, g.url, predictPath("starting"), key, predictBody); r.status != http.StatusServiceUnavailable {
		t.Errorf("no replica yet: %d, want 503", r.status)
	}
}

// TestBudgetBlockedEndpointAnswers503: an endpoint a blocking budget holds
// at zero says so, and asks nobody to start a replica.
func TestBudgetBlockedEndpointAnswers503(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	held := route("held", "risk", "classification", 1, ver("v1", 100))
	held.ScaledToZero = true
	held.Blocked = "budget exceeded: team risk spent $10.25 of its $10.00 monthly budget (enforcement block)"
	e.putRoute(t, held)
	key := e.newKey(t, "risk", "engineer", nil)
	g := startGateway(t, e.nc, gateway.Config{})
	wait.Eventually(t, 10*time.Second, g.Ready, "waiting for gateway ready")
	r := call(t, g.url, predictPath("held"), key, predictBody)
	if r.status != http.StatusServiceUnavailable || r.header.Get("Retry-After") != "" || !strings.Contains(string(r.body), "$10.00 monthly budget") {
		t.Errorf("blocked: %d Retry-After %q %s, want 503 without Retry-After naming the budget", r.status, r.header.Get("Retry-After"), r.body)
	}
	if w := g.Wakes(); w.Sent != 0 {
		t.Errorf("wakes sent = %d, want 0: no replica can start", w.Sent)
	}
}
