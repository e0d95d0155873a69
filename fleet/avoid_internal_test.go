package fleet

import (
	"fmt"
	"testing"

	"modelplane/placement"
)

// TestPlanAvoidingKeepsCPUNodes: CPU replicas that must avoid a node are
// placed on another CPU node, within that node's cores after its holds and
// after what this pass placed there before them.
func TestPlanAvoidingKeepsCPUNodes(t *testing.T) {
	nodes := []placement.Node{
		{Name: "cpu-a", CPUCores: 8, MemoryMB: 8192},
		{Name: "cpu-b", CPUCores: 8, MemoryMB: 8192, CPUHolds: []placement.CPUHold{{Owner: "old", OwnerEndpoint: "e", Cores: 2, MemoryMB: 512}}},
	}
	var reqs []placement.Request
	var avoid [][]string
	for i := range 4 {
		reqs = append(reqs, placement.Request{Replica: fmt.Sprintf("moved-%d", i), Endpoint: "e", CPUCores: 2, HostMemoryMB: 1024})
		avoid = append(avoid, []string{"cpu-a"})
	}
	out := planAvoiding(nodes, reqs, avoid)
	// cpu-b has 6 free cores: three replicas of 2, not the fourth.
	for i, res := range out[:3] {
		if res.Err != "" || res.Node != "cpu-b" || res.CPUCores != 2 {
			t.Errorf("moved-%d = %+v; want 2 cores on cpu-b", i, res)
		}
	}
	if out[3].Err == "" {
		t.Errorf("moved-3 = %+v; want unplaced, cpu-b's cores being taken and cpu-a avoided", out[3])
	}
	if len(nodes[1].CPUHolds) != 1 {
		t.Errorf("cpu-b holds %+v after planning; want the caller's nodes unchanged", nodes[1].CPUHolds)
	}
}
