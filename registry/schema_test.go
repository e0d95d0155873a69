package registry_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"sync/atomic"
	"testing"

	"modelplane/field"
	"modelplane/registry"
)

// TestSchemaExternalRefs checks that a model's schemas never load anything
// outside themselves: whatever a $ref, $schema or $id points at (a missing
// file, a system file, a JSON file on the server's disk, a URL), the answer is
// the same field error, so that it tells nothing about the target, and no
// request leaves the server.
func TestSchemaExternalRefs(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"type":"object"}`)
	}))
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	onDisk := filepath.Join(dir, "schema.json")
	if err := os.WriteFile(onDisk, []byte(`{"type":"object"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	notJSON := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(notJSON, []byte("root:x:0:0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const want = "external references are not allowed"
	tests := []struct {
		name   string
		schema string
	}{
		{"missing file", `{"$ref":"file://` + filepath.Join(dir, "missing.json") + `"}`},
		{"system file", `{"$ref":"file:///etc/passwd"}`},
		{"file that is not JSON", `{"$ref":"file://` + notJSON + `"}`},
		{"JSON file on the server", `{"$ref":"file://` + onDisk + `"}`},
		{"JSON file under a property", `{"type":"object","properties":{"x":{"$ref":"file://` + onDisk + `"}}}`},
		{"relative ref against a file $id", `{"$id":"file://` + dir + `/","$ref":"schema.json"}`},
		{"relative ref", `{"$ref":"other.json"}`},
		{"http URL", `{"$ref":"` + srv.URL + `/schema.json"}`},
		{"http meta-schema", `{"$schema":"` + srv.URL + `/meta.json","type":"object"}`},
		{"file meta-schema", `{"$schema":"file://` + onDisk + `","type":"object"}`},
	}
	for i, tt := range tests {
		for _, name := range []string{"input_schema", "output_schema"} {
			t.Run(tt.name+"/"+name, func(t *testing.T) {
				spec := registry.ModelSpec{Team: "risk", Name: fmt.Sprintf("ext-%d-%s", i, name[:1]), Task: registry.TaskLLM}
				if name == "input_schema" {
					spec.InputSchema = json.RawMessage(tt.schema)
				} else {
					spec.OutputSchema = json.RawMessage(tt.schema)
				}
				_, err := f.svc.CreateModel(t.Context(), f.riskEng, spec)
				var ve field.Errors
				if !errors.As(err, &ve) || len(ve) != 1 {
					t.Fatalf("CreateModel(%s) error = %v, want one field error", tt.schema, err)
				}
				if ve[0].Field != name || ve[0].Message != want {
					t.Errorf("CreateModel(%s) = %s: %q, want %s: %q", tt.schema, ve[0].Field, ve[0].Message, name, want)
				}
			})
		}
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("schema server hits = %d, want 0", n)
	}
	if n := f.count(t, "SELECT count(*) FROM models"); n != 0 {
		t.Errorf("models after refusals = %d, want 0", n)
	}
}

// TestSchemaInternalRefs checks that references inside the schema itself
// still work, and that the well-known meta-schemas (built into the
// compiler, never fetched) are still accepted.
func TestSchemaInternalRefs(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	for i, schema := range []string{
		`{"$defs":{"amount":{"type":"number","minimum":0}},"type":"object","properties":{"a":{"$ref":"#/$defs/amount"}}}`,
		`{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object"}`,
		`{"$schema":"http://json-schema.org/draft-07/schema#","definitions":{"n":{"type":"number"}},"properties":{"a":{"$ref":"#/definitions/n"}}}`,
		`{"$id":"https://example.com/s.json","$defs":{"n":{"$anchor":"num","type":"number"}},"properties":{"a":{"$ref":"#num"}}}`,
		`{"type":"array","items":{"$ref":"#"}}`,
	} {
		m, err := f.svc.CreateModel(t.Context(), f.riskEng, registry.ModelSpec{Team: "risk", Name: fmt.Sprintf("int-%d", i),
			Task: registry.TaskLLM, InputSchema: json.RawMessage(schema)})
		if err != nil {
			t.Errorf("CreateModel(%s): %v", schema, err)
			continue
		}
		var got, want any
		if err := json.Unmarshal(m.InputSchema, &got); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal([]byte(schema), &want); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("CreateModel(%s) stored %s", schema, m.InputSchema)
		}
	}
}
