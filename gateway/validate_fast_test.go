package gateway

import (
	"encoding/json"
	"testing"
)

// fastSchema is a schema of every keyword the fast check understands.
const fastSchema = `{"$schema":"https://json-schema.org/draft/2020-12/schema","title":"tx","type":"object",
 "required":["amount","country"],"additionalProperties":false,
 "properties":{"amount":{"type":"number","minimum":0,"maximum":1000000},"country":{"type":"string","minLength":2,"maxLength":2},
 "kind":{"type":"string","enum":["card","wire"]},"hour":{"type":"integer","exclusiveMinimum":-1,"exclusiveMaximum":24},
 "tags":{"type":"array","items":{"type":"string"},"minItems":1,"maxItems":3},"ok":{"type":"boolean"},"none":{"type":"null"},
 "meta":{"type":"object"}}}`

// fullAccepts is the full path's answer: decodeRequest, then the schema.
func fullAccepts(s *inputSchema, body []byte) bool {
	if _, err := decodeRequest(kindPredict, body); err != nil {
		return false
	}
	return s.validate(kindPredict, body, nil) == nil
}

// The fast check never accepts what the full path refuses, and it does
// accept the common well-formed bodies, which is what it is for.
func TestFastCheckAgreesWithFullPath(t *testing.T) {
	t.Parallel()
	s := compileSchema(json.RawMessage(fastSchema))
	if s.fast == nil {
		t.Fatal("schema of known keywords has no fast check")
	}
	for _, tc := range []struct {
		name, body string
		fast       bool // what the fast check says
	}{
		{"plain instances", `{"instances":[{"amount":12.5,"country":"DE"},{"amount":900,"country":"US"}]}`, true},
		{"every keyword", `{"instances":[{"amount":1,"country":"DE","kind":"wire","hour":23,"tags":["a","b"],"ok":true,"none":null,"meta":{"x":[1,{"y":"}"}]}}]}`, true},
		{"other top-level keys", ` {"parameters":{"a":[1,2,{"b":"]"}]},"instances":[{"amount":1,"country":"DE"}],"z":null} `, true},
		{"integer bound exactly met", `{"instances":[{"amount":0,"country":"DE"}]}`, true},
		{"fraction on a bound", `{"instances":[{"amount":0.0,"country":"DE"}]}`, false},
		{"below minimum", `{"instances":[{"amount":-1,"country":"DE"}]}`, false},
		{"above maximum", `{"instances":[{"amount":1e7,"country":"DE"}]}`, false},
		{"exclusive bound met", `{"instances":[{"amount":1,"country":"DE","hour":24}]}`, false},
		{"integer as fraction", `{"instances":[{"amount":1,"country":"DE","hour":2.5}]}`, false},
		{"missing required", `{"instances":[{"amount":1}]}`, false},
		{"additional property", `{"instances":[{"amount":1,"country":"DE","x":1}]}`, false},
		{"duplicate key", `{"instances":[{"amount":1,"country":"DE","amount":-5}]}`, false},
		{"escaped string", `{"instances":[{"amount":1,"country":"D\u0045"}]}`, false},
		{"escaped key", `{"instances":[{"amount":1,"countr\u0079":"DE"}]}`, false},
		{"too long", `{"instances":[{"amount":1,"country":"DEU"}]}`, false},
		{"multibyte length", `{"instances":[{"amount":1,"country":"ÄÖ"}]}`, true},
		{"not in enum", `{"instances":[{"amount":1,"country":"DE","kind":"cash"}]}`, false},
		{"wrong type", `{"instances":[{"amount":"1","country":"DE"}]}`, false},
		{"too many items", `{"instances":[{"amount":1,"country":"DE","tags":["a","b","c","d"]}]}`, false},
		{"no items", `{"instances":[{"amount":1,"country":"DE","tags":[]}]}`, false},
		{"row of features", `{"instances":[[1,"DE"]]}`, false},
		{"empty instances", `{"instances":[]}`, false},
		{"null instances", `{"instances":null}`, false},
		{"no instances", `{"inputs":[{"amount":1,"country":"DE"}]}`, false},
		{"instances twice", `{"instances":[{"amount":1,"country":"DE"}],"instances":[{}]}`, false},
		{"instances in another case", `{"Instances":[{"amount":1,"country":"DE"}]}`, false},
		{"not an object", `[{"amount":1,"country":"DE"}]`, false},
		{"invalid JSON", `{"instances":[{"amount":1,"country":"DE"}]`, false},
		{"trailing data", `{"instances":[{"amount":1,"country":"DE"}]} {}`, false},
		{"empty body", ``, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := []byte(tc.body)
			fast, full := acceptPredict(body, s.fast), fullAccepts(s, body)
			if fast != tc.fast {
				t.Errorf("fast check = %v, want %v", fast, tc.fast)
			}
			if fast && !full {
				t.Errorf("fast check accepts what the full path refuses")
			}
		})
	}
}

// A schema with a keyword the fast check does not know is never checked
// by it; the benchmark's and the fraud demo's (demo/fraud) are.
func TestCompileFastDeclinesUnknownKeywords(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, schema string
		fast         bool
	}{
		{"bench", `{"type":"object","required":["amount","country"],"additionalProperties":false,
 "properties":{"amount":{"type":"number","minimum":0},"country":{"type":"string","minLength":2,"maxLength":2}}}`, true},
		{"fraud demo's shape", `{"additionalProperties":false,"properties":{"amount":{"minimum":0,"type":"number"},
 "country":{"enum":["DE","US"],"type":"string"},"hour_of_day":{"maximum":23,"minimum":0,"type":"number"}},
 "required":["amount","country","hour_of_day"],"type":"object"}`, true},
		{"pattern", txSchema, false},
		{"format", `{"properties":{"d":{"type":"string","format":"date"}}}`, false},
		{"ref", `{"$defs":{"a":{"type":"number"}},"properties":{"d":{"$ref":"#/$defs/a"}}}`, false},
		{"type list", `{"type":["object","null"]}`, false},
		{"schema for additional properties", `{"additionalProperties":{"type":"number"}}`, false},
		{"non-string enum", `{"properties":{"d":{"enum":[1,2]}}}`, false},
		{"boolean exclusive bound (draft 4)", `{"properties":{"d":{"minimum":0,"exclusiveMinimum":true}}}`, false},
		{"fractional length", `{"properties":{"d":{"maxLength":2.5}}}`, false},
		{"oneOf", `{"oneOf":[{"type":"object"}]}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := compileFast(json.RawMessage(tc.schema)) != nil; got != tc.fast {
				t.Errorf("fast check compiled = %v, want %v", got, tc.fast)
			}
		})
	}
}

// A schema that does not compile is served without validation and warned
// about by the full path: the fast check stays out of it.
func TestFastCheckSkipsBrokenSchema(t *testing.T) {
	t.Parallel()
	s := compileSchema(json.RawMessage(`{"type":"object","minLength":"x"}`))
	if s == nil || s.err == nil {
		t.Fatalf("schema compiled: %+v", s)
	}
	if s.fast != nil {
		t.Error("a schema that does not compile has a fast check")
	}
}

// FuzzFastCheck: whatever the body, the fast check never accepts one the
// full path (decodeRequest and the compiled schema) refuses.
func FuzzFastCheck(f *testing.F) {
	for _, s := range []string{
		`{"instances":[{"amount":12.5,"country":"DE"}]}`, `{"instances":[{"amount":0,"country":"DE","hour":23,"tags":["a"]}]}`,
		`{"instances":[{"amount":-0,"country":"ÄÖ","kind":"card","meta":{"a":[1,"]"]}}]}`, `{"instances":[{"amount":1e-400,"country":"DE"}]}`,
		`{"instances":[{"amount":0.30000000000000001,"country":"DE"}]}`, `{"x":"\"","instances":[{"amount":1,"country":"DE"}]}`,
		`{"instances":[[1,"DE"]]}`, `{"instances":[]}`, `[]`, `{`, `null`,
	} {
		f.Add([]byte(s))
	}
	s := compileSchema(json.RawMessage(fastSchema))
	none := compileSchema(nil)
	f.Fuzz(func(t *testing.T, body []byte) {
		if acceptPredict(body, s.fast) && !fullAccepts(s, body) {
			t.Fatalf("fast check accepts %q, the full path refuses it", body)
		}
		if acceptPredict(body, nil) {
			if _, err := decodeRequest(kindPredict, body); err != nil || none.validate(kindPredict, body, nil) != nil {
				t.Fatalf("fast check without a schema accepts %q, the full path refuses it: %v", body, err)
			}
		}
	})
}
