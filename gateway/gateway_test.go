package gateway_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"modelplane/gateway"
	"modelplane/internal/wait"
	"modelplane/sim/replica"
)

func TestPredictAndStreamedChatEndToEnd(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.putRoute(t, route("fraud-scoring", "risk", "classification", 1, ver("v23", 100, startReplica(t, "v23", replica.TaskClassification))))
	e.putRoute(t, route("support-chat", "search", "llm", 1, ver("v42", 100, startReplica(t, "v42", replica.TaskLLM))))
	riskKey := e.newKey(t, "risk", "engineer", nil)
	searchKey := e.newKey(t, "search", "viewer", nil)
	g := startGateway(t, e.nc, gateway.Config{})
	wait.Eventually(t, 10*time.Second, g.Ready, "waiting for gateway ready")

	t.Run("predict", func(t *testing.T) {
		r := call(t, g.url, predictPath("fraud-scoring"), riskKey, predictBody, "X-Request-Id", "req-123")
		if r.status != http.StatusOK {
			t.Fatalf("status = %d (%s), want 200", r.status, r.body)
		}
		var out struct {
			Predictions  []json.RawMessage `json:"predictions"`
			ModelVersion string            `json:"model_version"`
		}
		if err := json.Unmarshal(r.body, &out); err != nil {
			t.Fatal(err)
		}
		if len(out.Predictions) != 2 || out.ModelVersion != "v23" {
			t.Errorf("body = %s, want 2 predictions from v23", r.body)
		}
		if got := r.header.Get("X-Model-Version"); got != "v23" {
			t.Errorf("X-Model-Version = %q, want v23", got)
		}
		if got := r.header.Get("X-Request-Id"); got != "req-123" {
			t.Errorf("X-Request-Id = %q, want the caller's req-123", got)
		}
	})
	t.Run("generated request id", func(t *testing.T) {
		r := call(t, g.url, predictPath("fraud-scoring"), riskKey, predictBody, "X-Request-Id", "bad id <script>")
		if got := r.header.Get("X-Request-Id"); got == "" || strings.Contains(got, " ") {
			t.Errorf("X-Request-Id = %q, want a fresh sane id", got)
		}
	})
	t.Run("streamed chat", func(t *testing.T) {
		body := `{"messages":[{"role":"user","content":"Where is my parcel?"}],"max_tokens":8,"stream":true,"stream_options":{"include_usage":true}}`
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, g.url+chatPath("support-chat"), strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+searchKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
			t.Fatalf("status %d content type %q, want 200 text/event-stream", resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		if got := resp.Header.Get("X-Model-Version"); got != "v42" {
			t.Errorf("X-Model-Version = %q, want v42", got)
		}
		var data []string
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				data = append(data, d)
			}
		}
		if len(data) < 3 || data[len(data)-1] != "[DONE]" {
			t.Fatalf("events = %q, want tokens then [DONE]", data)
		}
		var last struct {
			Usage *struct {
				CompletionTokens int `json:"completion_tokens"`
			} `json:"usage"`
		}
		if err := json.Unmarshal([]byte(data[len(data)-2]), &last); err != nil || last.Usage == nil || last.Usage.CompletionTokens != 8 {
			t.Errorf("last chunk = %s, want usage with 8 completion tokens", data[len(data)-2])
		}
	})
	t.Run("plain chat", func(t *testing.T) {
		r := call(t, g.url, chatPath("support-chat"), searchKey, `{"messages":[{"role":"user","content":"hi"}],"max_tokens":3}`)
		if r.status != http.StatusOK || !bytes.Contains(r.body, []byte(`"usage"`)) {
			t.Errorf("status %d body %s, want 200 with usage", r.status, r.body)
		}
	})
}

func TestAuthentication(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	addr := startReplica(t, "v23", replica.TaskClassification)
	e.putRoute(t, route("fraud-scoring", "risk", "classification", 1, ver("v23", 100, addr)))
	e.putRoute(t, route("support-chat", "search", "llm", 1, ver("v42", 100, addr)))
	riskKey := e.newKey(t, "risk", "viewer", nil)
	expired := time.Now().Add(-time.Minute)
	expiredKey := e.newKey(t, "risk", "engineer", &expired)
	admin := e.newKey(t, "", "platform_admin", nil)
	finance := e.newKey(t, "", "finance", nil)
	unknown, _ := makeKey(t)
	wrongSecret := riskKey[:len(riskKey)-4] + "AAAA"
	if wrongSecret == riskKey {
		wrongSecret = riskKey[:len(riskKey)-4] + "BBBB"
	}
	g := startGateway(t, e.nc, gateway.Config{})
	wait.Eventually(t, 10*time.Second, g.Ready, "waiting for gateway ready")
	wait.Eventually(t, 10*time.Second, func() bool {
		return call(t, g.url, predictPath("fraud-scoring"), finance, predictBody).status == http.StatusNotFound
	}, "waiting for keys")
	tests := []struct {
		name     string
		auth     string // whole Authorization header
		endpoint string
		want     int
	}{
		{"no header", "", "fraud-scoring", 401},
		{"basic auth", "Basic dXNlcjpwYXNz", "fraud-scoring", 401},
		{"not a key", "Bearer hello", "fraud-scoring", 401},
		{"unknown key", "Bearer " + unknown, "fraud-scoring", 401},
		{"wrong secret", "Bearer " + wrongSecret, "fraud-scoring", 401},
		{"expired", "Bearer " + expiredKey, "fraud-scoring", 401},
		{"own team", "Bearer " + riskKey, "fraud-scoring", 200},
		{"lower-case scheme", "bearer " + riskKey, "fraud-scoring", 200},
		{"another team's endpoint", "Bearer " + riskKey, "support-chat", 404},
		{"unknown endpoint", "Bearer " + riskKey, "no-such", 404},
		{"platform admin", "Bearer " + admin, "fraud-scoring", 200},
		{"finance key is no caller", "Bearer " + finance, "fraud-scoring", 404},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := call(t, g.url, predictPath(tt.endpoint), "", predictBody, "Authorization", tt.auth)
			if r.status != tt.want {
				t.Fatalf("status = %d (%s), want %d", r.status, r.body, tt.want)
			}
			if tt.want != 200 && r.header.Get("Content-Type") != "application/problem+json" {
				t.Errorf("content type = %q, want application/problem+json", r.header.Get("Content-Type"))
			}
			if r.header.Get("X-Request-Id") == "" {
				t.Error("no X-Request-Id")
			}
		})
	}
	// Not-yours and does-not-exist are the same answer, byte for byte
	// except the request id.
	a := call(t, g.url, predictPath("support-chat"), riskKey, predictBody, "X-Request-Id", "same")
	b := call(t, g.url, predictPath("no-such"), riskKey, predictBody, "X-Request-Id", "same")
	if strings.ReplaceAll(string(a.body), "support-chat", "X") != strings.ReplaceAll(string(b.body), "no-such", "X") {
		t.Errorf("another team's endpoint answers %s, an unknown one %s; want the same", a.body, b.body)
	}
}

func TestPinWinsOverSplit(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.putRoute(t, route("fraud-scoring", "risk", "classification", 1,
		ver("v23", 95, startReplica(t, "v23", replica.TaskClassification)),
		ver("v24", 5, startReplica(t, "v24", replica.TaskClassification))))
	key := e.newKey(t, "risk", "engineer", nil)
	g := startGateway(t, e.nc, gateway.Config{})
	wait.Eventually(t, 10*time.Second, g.Ready, "waiting for gateway ready")
	for range 20 {
		r := call(t, g.url, predictPath("fraud-scoring"), key, predictBody, "X-Model-Version", "v24")
		if r.status != 200 || r.header.Get("X-Model-Version") != "v24" || !bytes.Contains(r.body, []byte(`"model_version":"v24"`)) {
			t.Fatalf("pinned v24: status %d version %q body %s", r.status, r.header.Get("X-Model-Version"), r.body)
		}
	}
	// (A pin reaches only a version that takes traffic: see
	// TestPinOnlyToServingVersions. v24's 5 percent makes 20 pinned answers
	// from it by chance a 1e-26 event.)
	if r := call(t, g.url, predictPath("fraud-scoring"), key, predictBody, "X-Model-Version", "v99"); r.status != http.StatusNotFound {
		t.Errorf("unknown pin: status = %d, want 404", r.status)
	}
}

func TestRetryOnDeadReplica(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	live := startReplica(t, "v23", replica.TaskClassification)
	e.putRoute(t, route("fraud-scoring", "risk", "classification", 1, ver("v23", 100, deadAddr(t), live)))
	e.putRoute(t, route("dead", "risk", "classification", 1, ver("v1", 100, deadAddr(t))))
	e.putRoute(t, route("empty", "risk", "classification", 1, ver("v1", 100)))
	key := e.newKey(t, "risk", "engineer", nil)
	g := startGateway(t, e.nc, gateway.Config{})
	wait.Eventually(t, 10*time.Second, g.Ready, "waiting for gateway ready")
	for i := range 30 {
		if r := call(t, g.url, predictPath("fraud-scoring"), key, predictBody); r.status != http.StatusOK {
			t.Fatalf("request %d: status = %d (%s), want 200 after a retry on the live replica", i, r.status, r.body)
		}
	}
	for _, ep := range []string{"dead", "empty"} {
		r := call(t, g.url, predictPath(ep), key, predictBody)
		if r.status != http.StatusServiceUnavailable || r.header.Get("Retry-After") == "" {
			t.Errorf("%s: status %d Retry-After %q, want 503 with Retry-After", ep, r.status, r.header.Get("Retry-After"))
		}
	}
}

// TestRetryOnReplicaClosingWithoutAnswer: a replica being stopped as its
// endpoint scales down takes the connection and closes it without an
// answer; the request goes to another replica instead of failing 502.
func TestRetryOnReplicaClosingWithoutAnswer(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	live := startReplica(t, "v23", replica.TaskClassification)
	e.putRoute(t, route("fraud-scoring", "risk", "classification", 1, ver("v23", 100, ln.Addr().String(), live)))
	key := e.newKey(t, "risk", "engineer", nil)
	g := startGateway(t, e.nc, gateway.Config{})
	wait.Eventually(t, 10*time.Second, g.Ready, "waiting for gateway ready")
	for i := range 30 {
		if r := call(t, g.url, predictPath("fraud-scoring"), key, predictBody); r.status != http.StatusOK {
			t.Fatalf("request %d: status = %d (%s), want 200 from the replica that answers", i, r.status, r.body)
		}
	}
}

func TestRevokedKeyStopsWorking(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.putRoute(t, route("fraud-scoring", "risk", "classification", 1, ver("v23", 100, startReplica(t, "v23", replica.TaskClassification))))
	key := e.newKey(t, "risk", "engineer", nil)
	g := startGateway(t, e.nc, gateway.Config{})
	wait.Eventually(t, 10*time.Second, g.Ready, "waiting for gateway ready")
	if r := call(t, g.url, predictPath("fraud-scoring"), key, predictBody); r.status != 200 {
		t.Fatalf("before revocation: status = %d", r.status)
	}
	if err := e.keys.Delete(t.Context(), key[:16]); err != nil {
		t.Fatal(err)
	}
	// The key table follows the bucket's watch: how fast is a benchmark's
	// question (propagation), not this test's.
	wait.Eventually(t, 10*time.Second, func() bool {
		return call(t, g.url, predictPath("fraud-scoring"), key, predictBody).status == http.StatusUnauthorized
	}, "waiting for revocation")
}

func TestStaleGenerationIgnored(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := startReplica(t, "v5", replica.TaskClassification)
	key := e.newKey(t, "risk", "engineer", nil)
	g := startGateway(t, e.nc, gateway.Config{})
	wait.Eventually(t, 10*time.Second, g.Ready, "waiting for gateway ready")
	e.putRoute(t, route("fraud-scoring", "risk", "classification", 5, ver("v5", 100, a)))
	// Generation 5 must be held before 3 arrives: a watch created after both
	// puts would only see the bucket's latest value, which is then the truth.
	wait.Eventually(t, 10*time.Second, func() bool {
		return call(t, g.url, predictPath("fraud-scoring"), key, predictBody).header.Get("X-Model-Version") == "v5"
	}, "waiting for generation 5")
	e.putRoute(t, route("fraud-scoring", "risk", "classification", 3, ver("v3", 100, a)))
	e.putRoute(t, route("barrier", "risk", "classification", 1, ver("v1", 100, a)))
	wait.Eventually(t, 10*time.Second, func() bool { return call(t, g.url, predictPath("barrier"), key, predictBody).status == 200 }, "waiting for barrier")
	if r := call(t, g.url, predictPath("fraud-scoring"), key, predictBody); r.header.Get("X-Model-Version") != "v5" {
		t.Errorf("X-Model-Version = %q, want v5: generation 3 is older than the 5 held", r.header.Get("X-Model-Version"))
	}
}

func TestBodyLimit(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.putRoute(t, route("fraud-scoring", "risk", "classification", 1, ver("v23", 100, startReplica(t, "v23", replica.TaskClassification))))
	key := e.newKey(t, "risk", "engineer", nil)
	g := startGateway(t, e.nc, gateway.Config{MaxBodyBytes: 1024})
	wait.Eventually(t, 10*time.Second, g.Ready, "waiting for gateway ready")
	big := `{"instances":[` + strings.Repeat(`{"amount":1},`, 200) + `{"amount":1}]}`
	if r := call(t, g.url, predictPath("fraud-scoring"), key, big); r.status != http.StatusRequestEntityTooLarge {
		t.Errorf("with Content-Length: status = %d, want 413", r.status)
	}
	// Chunked, so the limit is found while reading.
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, g.url+predictPath("fraud-scoring"), struct{ *strings.Reader }{strings.NewReader(big)})
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("chunked: status = %d, want 413", resp.StatusCode)
	}
	for _, bad := range []string{`not json`, `[]`, `{"instances":[]}`, `{"instances":"x"}`} {
		if r := call(t, g.url, predictPath("fraud-scoring"), key, bad); r.status != http.StatusBadRequest {
			t.Errorf("body %s: status = %d, want 400", bad, r.status)
		}
	}
}
