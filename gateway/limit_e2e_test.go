package gateway_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"modelplane/gateway"
	"modelplane/internal/wait"
	"modelplane/sim/replica"
)

func problemDetail(t *testing.T, r result) string {
	t.Helper()
	if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("Content-Type = %q, want application/problem+json", ct)
	}
	var p struct {
		Status int    `json:"status"`
		Detail string `json:"detail"`
	}
	if err := json.Unmarshal(r.body, &p); err != nil || p.Status != r.status {
		t.Errorf("problem body %s (%v), want status %d", r.body, err, r.status)
	}
	return p.Detail
}

func TestSchemaValidationEndToEnd(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	fraud := route("fraud-scoring", "risk", "classification", 1, ver("v23", 100, startReplica(t, "v23", replica.TaskClassification)))
	fraud.InputSchema = json.RawMessage(`{"type":"object","required":["amount"],"properties":{"amount":{"type":"number","minimum":0},"country":{"type":"string"}}}`)
	e.putRoute(t, fraud)
	broken := route("broken-schema", "risk", "classification", 1, ver("v1", 100, startReplica(t, "v1", replica.TaskClassification)))
	broken.InputSchema = json.RawMessage(`{"type":"no-such-type"}`)
	e.putRoute(t, broken)
	chat := route("support-chat", "risk", "llm", 1, ver("v42", 100, startReplica(t, "v42", replica.TaskLLM)))
	chat.InputSchema = json.RawMessage(`{"type":"object","properties":{"max_tokens":{"type":"integer","maximum":64}}}`)
	e.putRoute(t, chat)
	key := e.newKey(t, "risk", "engineer", nil)
	g := startGateway(t, e.nc, gateway.Config{})
	wait.Eventually(t, 10*time.Second, g.Ready, "waiting for gateway ready")

	r := call(t, g.url, predictPath("fraud-scoring"), key, `{"instances":[{"amount":1},{"amount":2},{"amount":3},{"amount":-1}]}`)
	if r.status != http.StatusBadRequest {
		t.Fatalf("invalid instance: status %d (%s), want 400", r.status, r.body)
	}
	if d := problemDetail(t, r); d != "instances/3/amount: must be >= 0" {
		t.Errorf("detail = %q, want instances/3/amount: must be >= 0", d)
	}
	if r := call(t, g.url, predictPath("fraud-scoring"), key, predictBody); r.status != http.StatusOK {
		t.Errorf("valid body: status %d (%s), want 200", r.status, r.body)
	}
	r = call(t, g.url, chatPath("support-chat"), key, `{"messages":[{"role":"user","content":"hi"}],"max_tokens":1000}`)
	if r.status != http.StatusBadRequest || problemDetail(t, r) != "max_tokens: must be <= 64" {
		t.Errorf("invalid chat body: status %d (%s), want 400 naming max_tokens", r.status, r.body)
	}
	for range 3 {
		if r := call(t, g.url, predictPath("broken-schema"), key, `{"instances":["anything"]}`); r.status != http.StatusOK {
			t.Errorf("endpoint whose schema does not compile: status %d (%s), want 200 without validation", r.status, r.body)
		}
	}
}

func TestRateLimitsEndToEnd(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	addr := startReplica(t, "v23", replica.TaskClassification)
	e.putRoute(t, route("fraud-scoring", "risk", "classification", 1, ver("v23", 100, addr)))
	e.putRoute(t, route("churn", "risk", "classification", 1, ver("v1", 100, addr)))
	k1 := e.newKey(t, "risk", "engineer", nil)
	k2 := e.newKey(t, "risk", "engineer", nil)
	k3 := e.newKey(t, "risk", "engineer", nil)
	clk := newClock(t)
	// Keys: 2 requests, then one every 4 s. Endpoints: 3, then one a second.
	g := startGateway(t, e.nc, gateway.Config{Clock: clk, KeyRPS: 0.25, KeyBurst: 2, EndpointRPS: 1, EndpointBurst: 3})
	wait.Eventually(t, 10*time.Second, g.Ready, "waiting for gateway ready")

	want := func(key, endpoint string, status int, retryAfter string) {
		t.Helper()
		r := call(t, g.url, predictPath(endpoint), key, predictBody)
		if r.status != status {
			t.Fatalf("%s: status %d (%s), want %d", endpoint, r.status, r.body, status)
		}
		if got := r.header.Get("Retry-After"); got != retryAfter {
			t.Errorf("%s: Retry-After = %q, want %q", endpoint, got, retryAfter)
		}
		if status == http.StatusTooManyRequests {
			problemDetail(t, r)
		}
	}
	want(k1, "fraud-scoring", 200, "")
	want(k1, "fraud-scoring", 200, "")
	want(k1, "fraud-scoring", 429, "4") // key spent: its bucket refills in 4 s
	want(k1, "churn", 429, "4")         // the key's limit spans endpoints
	want(k2, "fraud-scoring", 200, "")  // another key is not limited by k1
	want(k2, "fraud-scoring", 429, "1") // the endpoint is spent: 1 s
	want(k3, "churn", 200, "")          // another endpoint has its own bucket
	advance(t, clk, 4*time.Second)
	want(k1, "fraud-scoring", 200, "")
}

func TestLoadSheddingEndToEnd(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var now, peak atomic.Int64
	release := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := now.Add(1)
		defer now.Add(-1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		<-release
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"predictions":[0.5],"model_version":"v1"}`))
	}))
	t.Cleanup(slow.Close)
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	e.putRoute(t, route("fraud-scoring", "risk", "classification", 1, ver("v1", 100, strings.TrimPrefix(slow.URL, "http://"))))
	key := e.newKey(t, "risk", "engineer", nil)
	g := startGateway(t, e.nc, gateway.Config{MaxOutstandingPerReplica: 2})
	wait.Eventually(t, 10*time.Second, g.Ready, "waiting for gateway ready")

	results := make(chan result, 2)
	for range 2 {
		go func() { results <- call(t, g.url, predictPath("fraud-scoring"), key, predictBody) }()
	}
	wait.Eventually(t, 10*time.Second, func() bool { return now.Load() == 2 }, "waiting for two requests at the replica")
	r := call(t, g.url, predictPath("fraud-scoring"), key, predictBody)
	if r.status != http.StatusTooManyRequests || r.header.Get("Retry-After") != "1" {
		t.Errorf("third request: status %d Retry-After %q (%s), want 429 and 1", r.status, r.header.Get("Retry-After"), r.body)
	}
	problemDetail(t, r)
	once.Do(func() { close(release) })
	for range 2 {
		if r := <-results; r.status != http.StatusOK {
			t.Errorf("queued request: status %d (%s), want 200", r.status, r.body)
		}
	}
	if p := peak.Load(); p > 2 {
		t.Errorf("replica saw %d concurrent requests, want at most 2", p)
	}
	if r := call(t, g.url, predictPath("fraud-scoring"), key, predictBody); r.status != http.StatusOK {
		t.Errorf("after the load: status %d, want 200", r.status)
	}
}
