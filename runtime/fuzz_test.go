package runtime_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"modelplane/runtime"
)

// fuzzServer is a warmed fraud runtime whose handler a fuzz target calls
// directly, without a network.
func fuzzServer(f *testing.F) http.Handler {
	f.Helper()
	s, err := runtime.Open(modelDir(f, fraudConfig(), fraudModel(), "model.json"), (&opened{}).openers(), runtime.Options{MaxInstances: 64})
	if err != nil {
		f.Fatal(err)
	}
	if err := s.Warm(context.Background()); err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = s.Close(context.Background()) })
	return s.Handler()
}

// fuzzBody checks that no body makes the server fail on its own: every
// answer is a success or a client error, never a 5xx or a panic.
func fuzzBody(f *testing.F, path string, seeds ...string) {
	h := fuzzServer(f)
	for _, s := range seeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("POST", path, strings.NewReader(body)))
		if rec.Code != http.StatusOK && rec.Code != http.StatusBadRequest && rec.Code != http.StatusRequestEntityTooLarge {
			t.Fatalf("body %q: status %d: %s", body, rec.Code, rec.Body)
		}
	})
}

func FuzzPredictBody(f *testing.F) {
	fuzzBody(f, "/predict",
		`{"instances": [{"amount": 250, "country": "de", "merchant": "online"}]}`,
		`{"instances": [[5, "us", "grocery"], {"amount": -1e38, "country": "fr", "merchant": "travel"}]}`,
		`{"instances": [{"amount": "x"}]}`, `{"instances": [null]}`, `[]`, `{"instances": {}}`)
}

func FuzzInferBody(f *testing.F) {
	fuzzBody(f, "/v2/models/fraud-scoring/infer",
		`{"inputs": [{"name": "input", "shape": [1, 5], "datatype": "FP32", "data": [1, 0, 1, 0, 2]}]}`,
		`{"inputs": [{"name": "amount", "shape": [1], "datatype": "FP32", "data": [1]}, {"name": "country", "shape": [1], "datatype": "BYTES", "data": ["us"]}, {"name": "merchant", "shape": [1], "datatype": "BYTES", "data": ["online"]}]}`,
		`{"inputs": [{"name": "input", "shape": [-1, 5], "datatype": "FP32", "data": []}]}`,
		`{"inputs": [{"name": "input", "shape": [9999999999, 5], "datatype": "BOOL", "data": [true]}]}`)
}
