package agent

import (
	"encoding/json"
	"fmt"
	"testing"

	"modelplane/busapi"
)

// plainDriver is a driver that cannot say which runtimes its node runs.
type plainDriver struct{ Driver }

// listing is a driver whose node runs the runtimes it lists.
type listing struct {
	Driver
	runtimes []string
}

func (l listing) Runtimes() []string { return l.runtimes }

// TestHeartbeatSaysWhichRuntimesTheNodeRuns: the sim driver runs every
// runtime; a driver that lists its runtimes is believed, an empty list
// included; a driver that cannot tell sends null, which the control plane
// reads as "not said" (placement does not filter the node).
func TestHeartbeatSaysWhichRuntimesTheNodeRuns(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sim := NewSimDriver(SimDriverConfig{})
	tests := []struct {
		name string
		drv  Driver
		want []string // nil: not said
		json string
	}{
		{"the sim driver runs every runtime", sim, []string{busapi.AnyRuntime}, `["*"]`},
		{"a listing driver is believed", listing{sim, []string{"builtin", "vllm"}}, []string{"builtin", "vllm"}, `["builtin","vllm"]`},
		{"a listing driver with nothing installed runs none", listing{sim, nil}, []string{}, `[]`},
		{"a driver that cannot tell says nothing", plainDriver{sim}, nil, `null`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			a, err := New(testConfig(t, "node-rt", tt.drv), e.nc, testLog(t))
			if err != nil {
				t.Fatal(err)
			}
			st := a.Status()
			if (st.Runtimes == nil) != (tt.want == nil) || fmt.Sprint(st.Runtimes) != fmt.Sprint(tt.want) {
				t.Fatalf("runtimes = %#v, want %#v", st.Runtimes, tt.want)
			}
			data, err := json.Marshal(st)
			if err != nil {
				t.Fatal(err)
			}
			var raw map[string]json.RawMessage
			if err := json.Unmarshal(data, &raw); err != nil {
				t.Fatal(err)
			}
			if got := string(raw["runtimes"]); got != tt.json {
				t.Errorf("heartbeat runtimes = %s, want %s", got, tt.json)
			}
		})
	}
}
