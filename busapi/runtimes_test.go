package busapi_test

import (
	"encoding/json"
	"testing"

	"modelplane/busapi"
)

// TestRunsRuntime: a node that says nothing runs anything (an agent from
// before nodes reported runtimes), "*" runs everything, a list what it
// lists and an empty list nothing; absent and null in a heartbeat both
// decode as not said.
func TestRunsRuntime(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		runtimes []string
		want     bool
	}{
		{"not said", nil, true},
		{"every runtime", []string{busapi.AnyRuntime}, true},
		{"listed", []string{"builtin", "vllm"}, true},
		{"not listed", []string{"builtin", "triton"}, false},
		{"none", []string{}, false},
	}
	for _, tt := range tests {
		if got := busapi.RunsRuntime(tt.runtimes, "vllm"); got != tt.want {
			t.Errorf("%s: RunsRuntime(%#v, vllm) = %t, want %t", tt.name, tt.runtimes, got, tt.want)
		}
	}
	for _, body := range []string{`{"node":"n"}`, `{"node":"n","runtimes":null}`} {
		var st busapi.NodeStatus
		if err := json.Unmarshal([]byte(body), &st); err != nil {
			t.Fatal(err)
		}
		if st.Runtimes != nil {
			t.Errorf("%s: runtimes = %#v, want nil (not said)", body, st.Runtimes)
		}
	}
	var st busapi.NodeStatus
	if err := json.Unmarshal([]byte(`{"node":"n","runtimes":[]}`), &st); err != nil || st.Runtimes == nil {
		t.Errorf("runtimes [] = %#v (%v), want an empty list, not nil", st.Runtimes, err)
	}
}
