package registry

import (
	"encoding/json"
	"testing"

	"modelplane/field"
)

// FuzzCheckServing: whatever serving metadata a caller sends, checking it
// never panics, and what it accepts the runtime's configuration can hold.
func FuzzCheckServing(f *testing.F) {
	f.Add([]byte(`{"features":[{"name":"amount"},{"name":"country","categories":["DE","FR"],"encoding":"native"}],"output":{"classes":["legit","fraud"],"threshold":0.7},"sample_inputs":[{"amount":1,"country":"FR"}]}`))
	f.Add([]byte(`{"features":[{"name":"amount","categories":["a"]}],"sample_inputs":[[1],"x",null,{"amount":"1e400"}]}`))
	f.Add([]byte(`{"output":{"threshold":-1,"classes":["a","a",""]}}`))
	m := Model{Task: TaskClassification, FeatureNames: []string{"amount", "country"},
		InputSchema:  json.RawMessage(`{"type":"object","properties":{"amount":{"type":"number","minimum":0},"country":{"type":"string"}}}`),
		OutputSchema: json.RawMessage(`{"type":"object","properties":{"label":{"enum":["legit","fraud"]}}}`)}
	f.Fuzz(func(t *testing.T, b []byte) {
		var sv Serving
		if json.Unmarshal(b, &sv) != nil {
			return
		}
		var errs field.Errors
		checkServing(&errs, &sv, m)
		if errs.Err() == nil {
			if _, err := json.Marshal(RuntimeConfig("e", "v", "xgboost-json", mustJSON(t, sv), nil)); err != nil {
				t.Fatalf("accepted serving %s does not encode: %v", b, err)
			}
		}
	})
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
