//go:build cgo

package gateway_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"modelplane/demo/docproc"
	"modelplane/gateway"
	"modelplane/internal/wait"
	"modelplane/runtime"
	"modelplane/runtime/onnx"
	"modelplane/serveapi"
)

// TestV2TensorModelThroughTheGateway: the demo's ONNX embedder, served
// with its own tensors by the built-in runtime (real ONNX Runtime), is
// called through the gateway as a V2-only version and as a plain one; the
// caller's instances of token ids give the same embeddings both ways, and
// rows of different lengths are the caller's 400 on the V2 path.
func TestV2TensorModelThroughTheGateway(t *testing.T) {
	t.Parallel()
	if _, err := onnx.RuntimeVersion(); err != nil {
		t.Fatalf("onnx runtime: %v (run scripts/install-deps.sh test)", err)
	}
	p, err := docproc.Build(docproc.DefaultSeed)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "model.onnx"), p.Embedder.Data, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, _ := json.Marshal(serveapi.Config{Model: "embedder-v2", Version: "v5", Format: "onnx", File: "model.onnx",
		Batching: serveapi.Batching{MaxBatchSize: 16}})
	if err := os.WriteFile(filepath.Join(dir, serveapi.ConfigFile), cfg, 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := runtime.Open(dir, nil, runtime.Options{Tensors: map[string]runtime.TensorOpener{
		"onnx": func(path string) (serveapi.TensorModel, error) { return onnx.LoadTensors(path, onnx.Options{}) }}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Warm(t.Context()); err != nil {
		t.Fatal(err)
	}
	rec := &paths{next: s.Handler()}
	hs := httptest.NewServer(rec)
	t.Cleanup(func() {
		hs.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.Close(ctx)
	})
	u, _ := url.Parse(hs.URL)

	e := newEnv(t)
	e.putRoute(t, route("embedder-v2", "search", "regression", 1, v2ver("v5", "embedder-v2", u.Host)))
	e.putRoute(t, route("embedder-plain", "search", "regression", 1, ver("v5", 100, u.Host)))
	key := e.newKey(t, "search", "engineer", nil)
	g := startGateway(t, e.nc, gateway.Config{})
	wait.Eventually(t, 10*time.Second, g.Ready, "waiting for gateway ready")

	body := `{"instances":[{"input_ids":[2,40,41,3],"attention_mask":[1,1,1,1]},{"input_ids":[2,50,3,0],"attention_mask":[1,1,1,0]}]}`
	got := map[string][]map[string][]float64{}
	for _, ep := range []string{"embedder-v2", "embedder-plain"} {
		r := call(t, g.url, predictPath(ep), key, body)
		if r.status != http.StatusOK {
			t.Fatalf("%s: %d %s", ep, r.status, r.body)
		}
		var a struct {
			Predictions []map[string][]float64 `json:"predictions"`
		}
		if err := json.Unmarshal(r.body, &a); err != nil || len(a.Predictions) != 2 || len(a.Predictions[0]["embedding"]) != docproc.Dim {
			t.Fatalf("%s: %s (%v); want two embeddings of %d", ep, r.body, err, docproc.Dim)
		}
		got[ep] = a.Predictions
	}
	if !rec.called("POST /v2/models/embedder-v2/infer") || !rec.called("POST /predict") {
		t.Fatalf("runtime was called on %v; want V2 infer for embedder-v2 and /predict for embedder-plain", rec.seen)
	}
	for i := range 2 {
		a, b := got["embedder-v2"][i]["embedding"], got["embedder-plain"][i]["embedding"]
		for k := range a {
			if a[k] != b[k] {
				t.Fatalf("instance %d: V2 %v, /predict %v; want the same", i, a[:4], b[:4])
			}
		}
	}
	r := call(t, g.url, predictPath("embedder-v2"), key, `{"instances":[{"input_ids":[2,3],"attention_mask":[1,1]},{"input_ids":[2,9,3],"attention_mask":[1,1,1]}]}`)
	if r.status != http.StatusBadRequest || !strings.Contains(string(r.body), "instances/1/") {
		t.Errorf("ragged rows: %d %s; want 400 naming instances/1", r.status, r.body)
	}
}
