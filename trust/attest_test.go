package trust

import (
	"errors"
	"testing"

	"modelplane/busapi"
)

func gpu(i int, typ string, profiles ...string) busapi.GPU {
	g := busapi.GPU{Index: i, Type: typ, MIG: profiles[0] != busapi.ProfileFull}
	for j, p := range profiles {
		g.Slices = append(g.Slices, busapi.Slice{Index: j, Profile: p})
	}
	return g
}

// TestCheckHoldsAHeartbeatToItsAttestation: each GPU a heartbeat claims
// must match an attested GPU of its type and layout not taken by another;
// fewer is fine, more, other types or other layouts are not.
func TestCheckHoldsAHeartbeatToItsAttestation(t *testing.T) {
	t.Parallel()
	full := []string{busapi.ProfileFull}
	mig := []string{"mig-3g.40gb", "mig-4g.40gb"}
	att := Inventory{GPUs: []GPUs{{Type: "A100-80GB", Count: 2, Slices: full}, {Type: "A100-80GB", Count: 1, Slices: mig}}}
	for _, tc := range []struct {
		name string
		st   busapi.NodeStatus
		ok   bool
	}{
		{"the attested inventory", busapi.NodeStatus{GPUs: []busapi.GPU{gpu(0, "A100-80GB", full...), gpu(1, "A100-80GB", full...), gpu(2, "A100-80GB", mig...)}}, true},
		{"fewer GPUs", busapi.NodeStatus{GPUs: []busapi.GPU{gpu(0, "A100-80GB", full...)}}, true},
		{"a third whole GPU", busapi.NodeStatus{GPUs: []busapi.GPU{gpu(0, "A100-80GB", full...), gpu(1, "A100-80GB", full...), gpu(2, "A100-80GB", full...)}}, false},
		{"another type", busapi.NodeStatus{GPUs: []busapi.GPU{gpu(0, "H100-80GB", full...)}}, false},
		{"another MIG layout", busapi.NodeStatus{GPUs: []busapi.GPU{gpu(0, "A100-80GB", "mig-1g.10gb")}}, false},
		{"cores on a GPU node", busapi.NodeStatus{CPUCores: 4, MemoryMB: 1024}, false},
	} {
		err := Check(att, tc.st)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrOverAttestation)) {
			t.Errorf("%s: Check = %v, want ok %v", tc.name, err, tc.ok)
		}
	}
	cpu := Inventory{CPUCores: 16, MemoryMB: 65536}
	if err := Check(cpu, busapi.NodeStatus{CPUCores: 16, MemoryMB: 65536}); err != nil {
		t.Errorf("the attested CPU inventory: %v", err)
	}
	if err := Check(cpu, busapi.NodeStatus{CPUCores: 17, MemoryMB: 65536}); !errors.Is(err, ErrOverAttestation) {
		t.Errorf("a 17th core: %v, want ErrOverAttestation", err)
	}
}
