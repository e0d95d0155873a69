package replica

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"modelplane/internal/wait"
)

// Test profiles: the demo fraud-detector's shape, with latencies small enough
// for fast tests.
const (
	classifierProfile = `{"latency_ms":{"p50":1,"p99":3},"error_rate":0,"score":{"mean":0.3,"sd":0.2},"class_balance":{"legit":0.7,"fraud":0.3}}`
	regressorProfile  = `{"latency_ms":{"p50":1,"p99":3},"value":{"mean":5,"sd":2}}`
	llmProfile        = `{"prefill_ms_per_token":0.05,"decode_base_ms":12,"decode_ms_per_seq":0.35,"kv_mb_per_token":0.8,"usable_gb":13}`
)

// startReplica builds and starts a replica on a loopback port and stops it
// when the test ends. It returns the server and its base URL.
func startReplica(t *testing.T, cfg Config) (*Server, string) {
	t.Helper()
	if cfg.ReplicaID == "" {
		cfg.ReplicaID = "r1"
	}
	if cfg.Version == "" {
		cfg.Version = "v23"
	}
	if cfg.Endpoint == "" {
		cfg.Endpoint = "fraud-scoring"
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	addr, err := s.Start(t.Context(), "127.0.0.1:0")
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(s.Stop)
	return s, "http://" + addr.String()
}

// startReady starts a replica with no load delay and waits until it is ready.
func startReady(t *testing.T, cfg Config) (*Server, string) {
	t.Helper()
	s, base := startReplica(t, cfg)
	wait.Eventually(t, 10*time.Second, s.Ready, "waiting for replica ready")
	return s, base
}

// newClient returns a client that keeps enough idle connections for the
// concurrent tests.
func newClient(t *testing.T) *http.Client {
	t.Helper()
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}

// post sends a JSON body and returns the status, headers and body.
func post(t *testing.T, c *http.Client, url, body string) (int, http.Header, []byte) {
	t.Helper()
	resp, err := c.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read %s: %v", url, err)
	}
	return resp.StatusCode, resp.Header, b
}

func get(t *testing.T, c *http.Client, url string) int {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

func decode[T any](t *testing.T, b []byte) T {
	t.Helper()
	var v T
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("decode %T: %v", v, err)
	}
	return v
}

// set returns *v, failing the test when the prediction raw left it out.
func set(t *testing.T, v *float64, raw []byte) float64 {
	t.Helper()
	if v == nil {
		t.Fatalf("prediction %s lacks the field", raw)
	}
	return *v
}
