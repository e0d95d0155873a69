package handlers

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
)

// TestModelSchemaExternalRef creates models whose input schema refers to a
// missing file, a system file, a JSON file on the server's disk and a URL:
// every one is a 400 with the same problem document, which quotes nothing of
// the target, and the URL is never fetched.
func TestModelSchemaExternalRef(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"type":"object"}`)
	}))
	t.Cleanup(srv.Close)
	onDisk := filepath.Join(t.TempDir(), "schema.json")
	if err := os.WriteFile(onDisk, []byte(`{"type":"object"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	targets := []string{
		"file://" + filepath.Join(t.TempDir(), "missing.json"),
		"file:///etc/passwd",
		"file://" + onDisk,
		srv.URL + "/schema.json",
	}
	var first string
	for i, target := range targets {
		body := fmt.Sprintf(`{"team":"risk","name":"ext-ref-%d","task":"classification","input_schema":{"$ref":%q}}`, i, target)
		r := e.call(t, e.Keys["risk-engineer"], http.MethodPost, "/models", &payload{contentType: "application/json", body: []byte(body)})
		p := problem(t, "POST /models with $ref "+target, r, http.StatusBadRequest)
		if !p.names("body.input_schema") {
			t.Errorf("POST /models with $ref %s: errors at %v, want body.input_schema", target, p.locations())
		}
		msgs, _ := json.Marshal(p.Errors)
		if i == 0 {
			first = string(msgs)
			continue
		}
		if string(msgs) != first {
			t.Errorf("POST /models with $ref %s: errors %s, want the same as for %s: %s", target, msgs, targets[0], first)
		}
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("schema server hits = %d, want 0", n)
	}
	r := e.call(t, e.Keys["risk-engineer"], http.MethodGet, "/models/ext-ref-2", nil)
	problem(t, "GET the model whose schema was a file on the server", r, http.StatusNotFound)
}
