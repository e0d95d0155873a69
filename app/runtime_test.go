package app

import (
	"context"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"modelplane/internal/wait"
	"modelplane/runtime"
	"modelplane/serveapi"
)

// logistic is a one-feature logistic regression read from a JSON file,
// a real (if small) model for the runtime command's tests. Each Predict
// takes a token from gate, so a test can hold a request in flight.
type logistic struct {
	W, B float64
	gate chan struct{}
}

func (m *logistic) NumFeatures() int   { return 1 }
func (m *logistic) OutputKind() string { return serveapi.OutputProbability }
func (m *logistic) Close() error       { return nil }
func (m *logistic) Predict(rows [][]float32) ([][]float32, error) {
	<-m.gate
	out := make([][]float32, len(rows))
	for i, r := range rows {
		out[i] = []float32{float32(1 / (1 + math.Exp(-(m.W*float64(r[0]) + m.B))))}
	}
	return out, nil
}

func runtimeDir(t *testing.T, sample string) string {
	t.Helper()
	dir := t.TempDir()
	cfg := serveapi.Config{Model: "churn", Version: "v1", Format: "logistic", File: "m.json",
		Features: []serveapi.Feature{{Name: "x"}}, SampleInputs: []json.RawMessage{json.RawMessage(sample)},
		Batching: serveapi.Batching{MaxBatchSize: 4}}
	b, _ := json.Marshal(cfg)
	if err := os.WriteFile(filepath.Join(dir, serveapi.ConfigFile), b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "m.json"), []byte(`{"W": 2, "B": -1}`), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

func logisticOpeners(gate chan struct{}) map[string]runtime.Opener {
	return map[string]runtime.Opener{"logistic": func(path string) (serveapi.Model, error) {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		m := &logistic{gate: gate}
		return m, json.Unmarshal(b, m)
	}}
}

func statusOf(url string) int {
	resp, err := http.Get(url)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

func TestRuntimeCommandServesThenDrainsInFlight(t *testing.T) {
	t.Parallel()
	gate := make(chan struct{}, 8)
	gate <- struct{}{} // warm-up
	gate <- struct{}{} // the first request
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	addrs := make(chan string, 1)
	done := make(chan error, 1)
	cfg := RuntimeConfig{ModelDir: runtimeDir(t, `{"x": 1}`), Host: "127.0.0.1", Port: 0, ReplicaID: "r-7",
		DrainTimeout: 10 * time.Second, MaxBodyBytes: 1 << 20, LogLevel: "error"}
	go func() { done <- runRuntime(ctx, cfg, logisticOpeners(gate), func(a string) { addrs <- a }) }()
	base := "http://" + <-addrs
	wait.Eventually(t, 10*time.Second, func() bool { return statusOf(base+"/v2/health/ready") == 200 }, "runtime never ready")

	post := func() (int, string) {
		resp, err := http.Post(base+"/predict", "application/json", strings.NewReader(`{"instances": [{"x": 0.5}]}`))
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := post(); code != 200 || !strings.Contains(body, `"score":0.5`) {
		t.Fatalf("predict: %d %s, want a score of 0.5", code, body)
	}
	type result struct {
		code int
		body string
	}
	inflight := make(chan result, 1)
	go func() { c, b := post(); inflight <- result{c, b} }()
	wait.Eventually(t, 10*time.Second, func() bool {
		resp, err := http.Get(base + "/v2/stats")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var st struct {
			InFlight int `json:"in_flight"`
		}
		return json.NewDecoder(resp.Body).Decode(&st) == nil && st.InFlight == 1
	}, "second request not in flight")
	stop() // what SIGTERM does through signal.NotifyContext
	wait.Eventually(t, 10*time.Second, func() bool { return statusOf(base+"/v2/health/ready") != 200 }, "still ready while draining")
	gate <- struct{}{}
	if r := <-inflight; r.code != 200 {
		t.Fatalf("request in flight at SIGTERM: %d %s, want 200", r.code, r.body)
	}
	if err := <-done; err != nil {
		t.Fatalf("runtime after drain: %v, want nil (exit 0)", err)
	}
}

func TestRuntimeCommandFailsOnWarmUp(t *testing.T) {
	t.Parallel()
	cfg := RuntimeConfig{ModelDir: runtimeDir(t, `{"y": 1}`), Host: "127.0.0.1", DrainTimeout: time.Second, MaxBodyBytes: 1 << 20, LogLevel: "error"}
	err := runRuntime(context.Background(), cfg, logisticOpeners(make(chan struct{}, 1)), nil)
	if err == nil || !strings.Contains(err.Error(), "warm-up: sample_inputs[0].x: is missing") {
		t.Fatalf("got %v, want the warm-up failure naming the sample", err)
	}
	if err := runRuntime(context.Background(), cfg, runtimeOpeners(), nil); err == nil || !strings.Contains(err.Error(), `no loader for format "logistic"`) {
		t.Fatalf("got %v, want the missing loader", err)
	}
}

func TestRuntimeConfigNamesBadSettings(t *testing.T) {
	t.Parallel()
	c := RuntimeConfig{Port: 70000, LogLevel: "loud"}
	err := c.Validate()
	for _, want := range []string{"--model-dir", "--port", "--drain-timeout", "--max-body-bytes", "--log-level"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v, want it to name %s", err, want)
		}
	}
}
