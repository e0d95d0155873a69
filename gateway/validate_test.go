package gateway

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"modelplane/busapi"
)

const txSchema = `{"type":"object","required":["amount","country"],"additionalProperties":false,
 "properties":{"amount":{"type":"number","minimum":0},"country":{"type":"string","minLength":2,"maxLength":2},
 "card":{"type":"object","properties":{"bin":{"type":"string","pattern":"^[0-9]{6}$"}}}}}`

const chatSchema = `{"type":"object","required":["messages"],"properties":{"max_tokens":{"type":"integer","maximum":4096},
 "messages":{"type":"array","items":{"type":"object","required":["role"],"properties":{"role":{"enum":["system","user","assistant"]}}}}}}`

func TestValidatePaths(t *testing.T) {
	t.Parallel()
	tx := compileSchema(json.RawMessage(txSchema))
	chat := compileSchema(json.RawMessage(chatSchema))
	if tx == nil || tx.err != nil || chat == nil || chat.err != nil {
		t.Fatalf("schemas do not compile: %v %v", tx.err, chat.err)
	}
	tests := []struct {
		name string
		s    *inputSchema
		k    kind
		body string
		want string // empty: valid
	}{
		{"valid predict", tx, kindPredict, `{"instances":[{"amount":1,"country":"DE"},{"amount":0,"country":"US","card":{"bin":"123456"}}]}`, ""},
		{"minimum with instance index", tx, kindPredict,
			`{"instances":[{"amount":1,"country":"DE"},{"amount":2,"country":"FR"},{"amount":3,"country":"IT"},{"amount":-5,"country":"US"}]}`,
			"instances/3/amount: must be >= 0"},
		{"first failing instance wins", tx, kindPredict, `{"instances":[{"amount":1,"country":"DE"},{"amount":"x","country":"DE"},{"amount":-1,"country":"DE"}]}`,
			"instances/1/amount: must be number, not string"},
		{"nested property", tx, kindPredict, `{"instances":[{"amount":1,"country":"DE","card":{"bin":"12ab"}}]}`,
			"instances/0/card/bin: does not satisfy pattern"},
		{"missing property", tx, kindPredict, `{"instances":[{"amount":1}]}`, "instances/0/country: is required"},
		{"extra property", tx, kindPredict, `{"instances":[{"amount":1,"country":"DE","secret":"x"}]}`, "instances/0/secret: is not allowed"},
		{"instance of the wrong type", tx, kindPredict, `{"instances":[[1,2]]}`, "instances/0: must be object, not array"},
		{"valid chat", chat, kindChat, `{"messages":[{"role":"user","content":"hi"}],"max_tokens":10}`, ""},
		{"chat body", chat, kindChat, `{"messages":[{"role":"user"}],"max_tokens":5000}`, "max_tokens: must be <= 4096"},
		{"chat nested", chat, kindChat, `{"messages":[{"role":"user"},{"role":"robot"}]}`, "messages/1/role: is not an allowed value"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := ""
			if bad := tt.s.validate(tt.k, []byte(tt.body), nil); bad != nil {
				got = bad.Error()
			}
			if got != tt.want {
				t.Errorf("validate = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestSchemaThatAcceptsAll(t *testing.T) {
	t.Parallel()
	for _, raw := range []string{"", " ", "null", "{}", "{ }", "true"} {
		if s := compileSchema(json.RawMessage(raw)); s != nil {
			t.Errorf("compileSchema(%q) = %+v, want nil (accept all)", raw, s)
		}
		var s *inputSchema
		if bad := s.validate(kindPredict, []byte(`{"instances":[1]}`), nil); bad != nil {
			t.Errorf("nil schema refused: %v", bad)
		}
	}
}

func TestBadSchemaIsKeptWithItsError(t *testing.T) {
	t.Parallel()
	for _, raw := range []string{`{"type":"nope"}`, `{"type":`, `{"$ref":"file:///etc/passwd"}`, `{"$ref":"https://example.com/s.json"}`} {
		s := compileSchema(json.RawMessage(raw))
		if s == nil || s.err == nil || s.schema != nil {
			t.Errorf("compileSchema(%q) = %+v, want an error and no schema", raw, s)
		}
		if bad := s.validate(kindPredict, []byte(`{"instances":[1]}`), nil); bad != nil {
			t.Errorf("a schema that does not compile refused a body: %v", bad)
		}
	}
}

// TestSchemaLoadsNothingOutside checks that a routing entry's schema never
// makes the gateway read a file or fetch a URL: a JSON file on the gateway's
// disk (which the library's default loader would read and accept) and a URL
// of a server that counts its requests both leave the schema uncompiled with
// errNoLoad itself, and the server is never asked. References inside the
// schema still work.
func TestSchemaLoadsNothingOutside(t *testing.T) {
	t.Parallel()
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"type":"object"}`))
	}))
	t.Cleanup(srv.Close)
	onDisk := filepath.Join(t.TempDir(), "schema.json")
	if err := os.WriteFile(onDisk, []byte(`{"type":"object"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, raw := range []string{
		`{"$ref":"file://` + onDisk + `"}`,
		`{"properties":{"a":{"$ref":"file://` + onDisk + `"}}}`,
		`{"$schema":"file://` + onDisk + `"}`,
		`{"$ref":"file:///etc/passwd"}`,
		`{"$ref":"` + srv.URL + `/s.json"}`,
		`{"$ref":"other.json"}`,
	} {
		s := compileSchema(json.RawMessage(raw))
		if s == nil {
			t.Errorf("compileSchema(%s) = nil (accept all), want errNoLoad", raw)
			continue
		}
		if s.schema != nil || !errors.Is(s.err, errNoLoad) {
			t.Errorf("compileSchema(%s): compiled %t, error %v; want no schema and exactly errNoLoad", raw, s.schema != nil, s.err)
		}
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("schema server hits = %d, want 0", n)
	}
	s := compileSchema(json.RawMessage(`{"$defs":{"n":{"type":"number"}},"type":"object","properties":{"a":{"$ref":"#/$defs/n"}}}`))
	if s == nil || s.err != nil {
		t.Fatalf("internal $ref: compileSchema = %+v, want a schema", s)
	}
	if bad := s.validate(kindPredict, []byte(`{"instances":[{"a":"x"}]}`), nil); bad == nil {
		t.Error("internal $ref: a string where #/$defs/n wants a number was accepted")
	}
}

// The schema is compiled when the entry arrives and reused while it does
// not change: replica and generation changes keep the compiled object.
func TestSchemaCompiledOncePerChange(t *testing.T) {
	t.Parallel()
	src := busapi.Route{Endpoint: "e", Team: "t", Task: "classification", Generation: 1, InputSchema: json.RawMessage(txSchema),
		Versions: []busapi.RouteVersion{{Name: "v1", Weight: 100, Replicas: []busapi.RouteReplica{{ID: "a", Addr: "127.0.0.1:1"}}}}}
	t1 := (&routeTable{byName: map[string]*route{}}).with("e", &src, routeDefaults{timeout: time.Second})
	first := t1.byName["e"].schema
	if first == nil || first.schema == nil {
		t.Fatal("schema not compiled when the route arrived")
	}
	src.Generation = 2
	src.Versions[0].Replicas = append(src.Versions[0].Replicas, busapi.RouteReplica{ID: "b", Addr: "127.0.0.1:2"})
	t2 := t1.with("e", &src, routeDefaults{timeout: time.Second})
	if got := t2.byName["e"].schema; got != first {
		t.Error("schema compiled again although it did not change")
	}
	src.Generation = 3
	src.InputSchema = json.RawMessage(`{"type":"object"}`)
	t3 := t2.with("e", &src, routeDefaults{timeout: time.Second})
	if got := t3.byName["e"].schema; got == first || got == nil || string(got.raw) != `{"type":"object"}` {
		t.Error("changed schema not compiled afresh")
	}
}

// FuzzValidate: any body, checked against a fixed schema, never panics and
// gets the same answer every time (the reported path does not depend on
// map order), and a refusal always names a path.
func FuzzValidate(f *testing.F) {
	for _, s := range []string{
		`{"instances":[{"amount":1,"country":"DE"}]}`, `{"instances":[{"amount":-1,"country":"D","x":1,"y":2}]}`,
		`{"instances":[{},{"card":{"bin":1}}]}`, `{"messages":[{"role":"robot"},{}],"max_tokens":1e400}`, `[]`, `{`, `null`,
	} {
		f.Add(false, []byte(s))
		f.Add(true, []byte(s))
	}
	tx := compileSchema(json.RawMessage(txSchema))
	chat := compileSchema(json.RawMessage(chatSchema))
	f.Fuzz(func(t *testing.T, isChat bool, body []byte) {
		s, k := tx, kindPredict
		if isChat {
			s, k = chat, kindChat
		}
		first := s.validate(k, body, nil)
		for range 3 {
			again := s.validate(k, body, nil)
			if (first == nil) != (again == nil) || first != nil && *first != *again {
				t.Fatalf("validate not deterministic: %v then %v", first, again)
			}
		}
		if first != nil && (first.Path == "" || first.Reason == "") {
			t.Fatalf("refusal without a path or reason: %+v", first)
		}
	})
}
