package catalog_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"modelplane/agent/catalog"
	"modelplane/runtime"
	"modelplane/serveapi"
)

// doubler is a one-feature model whose value is twice its input.
type doubler struct{}

func (doubler) NumFeatures() int   { return 1 }
func (doubler) OutputKind() string { return serveapi.OutputValue }
func (doubler) Close() error       { return nil }
func (doubler) Predict(rows [][]float32) ([][]float32, error) {
	out := make([][]float32, len(rows))
	for i, r := range rows {
		out[i] = []float32{2 * r[0]}
	}
	return out, nil
}

// TestTritonAdapterReadsTheBuiltinRuntime scrapes the built-in runtime's
// own /metrics, not a copy of its names: the agent's heartbeat gets the
// requests answered, the mean batch, in-flight from the runtime's own
// gauge (present, so not the pending-count fallback) and the runtime's
// cold start, load and warm-up.
func TestTritonAdapterReadsTheBuiltinRuntime(t *testing.T) {
	dir := t.TempDir()
	cfg := serveapi.Config{Model: "m", Version: "v1", Format: "test", File: "model.bin", Features: []serveapi.Feature{{Name: "x"}},
		SampleInputs: []json.RawMessage{json.RawMessage(`{"x":1}`)}, Batching: serveapi.Batching{MaxBatchSize: 4, QueueTimeoutMS: 1000}}
	b, _ := json.Marshal(cfg)
	if err := os.WriteFile(filepath.Join(dir, serveapi.ConfigFile), b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "model.bin"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := runtime.New(runtime.Options{})
	if err := s.Load(dir, map[string]runtime.Opener{"test": func(string) (serveapi.Model, error) { return doubler{}, nil }}); err != nil {
		t.Fatal(err)
	}
	if err := s.Warm(t.Context()); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	resp, err := http.Post(srv.URL+"/predict", "application/json", strings.NewReader(`{"instances":[{"x":2},{"x":3}]}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("predict = %d", resp.StatusCode)
	}
	resp, err = http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	m, err := catalog.Parse(catalog.AdapterTriton, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if m.Requests != 1 || m.BatchSize != 2 || m.InFlight != 0 || m.QueueDepth != 0 {
		t.Errorf("metrics = %+v; want 1 request, a batch of 2, nothing in flight or queued", m)
	}
	if m.LoadSeconds <= 0 || m.WarmupSeconds <= 0 {
		t.Errorf("cold start = load %vs, warm-up %vs; want both measured", m.LoadSeconds, m.WarmupSeconds)
	}
	for _, name := range []string{catalog.InFlightMetric, catalog.LoadMetric, catalog.WarmupMetric} {
		if !bytes.Contains(body, []byte("\n"+name+"{")) {
			t.Errorf("the runtime does not export %s, which the adapter reads", name)
		}
	}
}
