package runtime_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"modelplane/runtime"
	"modelplane/serveapi"
)

// echo is a tensor model in Go: ids INT64 [batch, seq] and text BYTES
// [batch] in, the same out, so that a fuzz target reaches the runtime's
// tensor decoding, batching and answers without ONNX Runtime.
type echo struct{}

func (echo) Inputs() []serveapi.TensorSpec {
	return []serveapi.TensorSpec{{Name: "ids", Datatype: "INT64", Shape: []int64{-1, -1}}, {Name: "text", Datatype: "BYTES", Shape: []int64{-1}}}
}

func (echo) Outputs() []serveapi.TensorSpec {
	return []serveapi.TensorSpec{{Name: "ids_out", Datatype: "INT64", Shape: []int64{-1, -1}}, {Name: "text_out", Datatype: "BYTES", Shape: []int64{-1}}}
}

func (echo) Run(in []serveapi.Tensor) ([]serveapi.Tensor, error) {
	a, b := in[0], in[1]
	a.Name, b.Name = "ids_out", "text_out"
	return []serveapi.Tensor{a, b}, nil
}

func (echo) Close() error { return nil }

func fuzzTensorServer(f *testing.F) http.Handler {
	f.Helper()
	dir := f.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "model.echo"), []byte("echo"), 0o644); err != nil {
		f.Fatal(err)
	}
	raw, _ := json.Marshal(serveapi.Config{Model: "echo", Format: "echo", File: "model.echo", Batching: serveapi.Batching{MaxBatchSize: 8}})
	if err := os.WriteFile(filepath.Join(dir, serveapi.ConfigFile), raw, 0o644); err != nil {
		f.Fatal(err)
	}
	s, err := runtime.Open(dir, nil, runtime.Options{MaxInstances: 64, Tensors: map[string]runtime.TensorOpener{
		"echo": func(string) (serveapi.TensorModel, error) { return echo{}, nil }}})
	if err != nil {
		f.Fatal(err)
	}
	if err := s.Warm(context.Background()); err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = s.Close(context.Background()) })
	return s.Handler()
}

// No body makes a tensor model's server fail on its own: V2 and /predict
// answer a success or a client error, never a 5xx or a panic.
func FuzzTensorBodies(f *testing.F) {
	h := fuzzTensorServer(f)
	for _, s := range []string{
		`{"inputs":[{"name":"ids","datatype":"INT64","shape":[1,2],"data":[1,2]},{"name":"text","datatype":"BYTES","shape":[1],"data":["a"]}]}`,
		`{"inputs":[{"name":"ids","datatype":"INT64","shape":[2,0],"data":[]},{"name":"text","datatype":"BYTES","shape":[2],"data":["a","b"]}]}`,
		`{"inputs":[{"name":"ids","datatype":"INT64","shape":[9999999999,9999999999],"data":[1]}]}`,
		`{"instances":[{"ids":[1,2,3],"text":"x"},{"ids":[4],"text":"y"},{"ids":[[1]],"text":["z"]}]}`,
		`{"instances":[{"ids":9223372036854775808,"text":1}]}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		for _, path := range []string{"/v2/models/echo/infer", "/predict"} {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest("POST", path, strings.NewReader(body)))
			if rec.Code != http.StatusOK && rec.Code != http.StatusBadRequest && rec.Code != http.StatusRequestEntityTooLarge {
				t.Fatalf("%s %q: status %d: %s", path, body, rec.Code, rec.Body)
			}
		}
	})
}
