package placement

import (
	"fmt"
	"testing"

	"modelplane/busapi"
)

func cpuHost(name string, cores, memoryMB int, holds ...CPUHold) Node {
	return Node{Name: name, CPUCores: cores, MemoryMB: memoryMB, CPUHolds: holds}
}

func cpuReq(i int, endpoint string, cores, memoryMB int) Request {
	return Request{Replica: fmt.Sprintf("r%d", i), Endpoint: endpoint, Tier: "standard", CPUCores: cores, HostMemoryMB: memoryMB}
}

// where lists each result's node, or its error.
func where(res []Result) []string {
	out := make([]string, len(res))
	for i, r := range res {
		out[i] = r.Node
		if r.Err != "" {
			out[i] = "error: " + r.Err
		}
	}
	return out
}

func TestCPUPlacement(t *testing.T) {
	t.Parallel()
	gpuNode := node("gpu-1", gpu(0, a100), gpu(1, a100))
	tests := []struct {
		name  string
		nodes []Node
		reqs  []Request
		want  []string
	}{
		{"a CPU replica never takes a GPU", []Node{gpuNode}, []Request{cpuReq(0, "e", 1, 1024)},
			[]string{"error: no CPU node with 1 free cores and 1024 MiB of free memory"}},
		{"a GPU replica never takes a CPU node", []Node{cpuHost("cpu-1", 64, 1<<20)}, []Request{rep(0, "e", "standard", 4096)},
			[]string{"error: no free mig-1g.10gb, mig-2g.20gb, mig-3g.40gb, mig-4g.40gb, mig-7g.80gb slice or whole GPU"}},
		{"CPU and GPU replicas each go to their kind", []Node{gpuNode, cpuHost("cpu-1", 8, 8192)},
			[]Request{cpuReq(0, "e", 2, 1024), rep(1, "g", "standard", 0)}, []string{"cpu-1", "gpu-1"}},
		{"cores run out", []Node{cpuHost("cpu-1", 8, 1<<20)},
			[]Request{cpuReq(0, "e", 4, 1024), cpuReq(1, "e", 4, 1024), cpuReq(2, "e", 1, 1024)},
			[]string{"cpu-1", "cpu-1", "error: no CPU node with 1 free cores and 1024 MiB of free memory"}},
		{"memory runs out before cores", []Node{cpuHost("cpu-1", 8, 4096)},
			[]Request{cpuReq(0, "e", 1, 3072), cpuReq(1, "e", 1, 2048)},
			[]string{"cpu-1", "error: no CPU node with 1 free cores and 2048 MiB of free memory"}},
		{"held cores count", []Node{cpuHost("cpu-1", 8, 1<<20, CPUHold{Owner: "old", OwnerEndpoint: "x", Cores: 7, MemoryMB: 1024})},
			[]Request{cpuReq(0, "e", 2, 1024)}, []string{"error: no CPU node with 2 free cores and 1024 MiB of free memory"}},
		{"spread over nodes before packing", []Node{cpuHost("cpu-1", 16, 1<<20), cpuHost("cpu-2", 16, 1<<20)},
			[]Request{cpuReq(0, "e", 2, 1024), cpuReq(1, "e", 2, 1024), cpuReq(2, "f", 2, 1024)}, []string{"cpu-1", "cpu-2", "cpu-1"}},
		{"best fit: the fuller node first", []Node{cpuHost("cpu-1", 16, 1<<20), cpuHost("cpu-2", 4, 1<<20)},
			[]Request{cpuReq(0, "e", 2, 1024), cpuReq(1, "f", 16, 1024)}, []string{"cpu-2", "cpu-1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			res := Plan(tt.nodes, tt.reqs)
			if got := where(res); fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("Plan = %q, want %q", got, tt.want)
			}
			for i, r := range res {
				if r.Err != "" || !tt.reqs[i].CPU() {
					continue
				}
				if r.GPUType != busapi.CPUType || r.Profile != busapi.ProfileCPU || len(r.Slots) != 0 ||
					r.CPUCores != tt.reqs[i].CPUCores || r.HostMemoryMB != tt.reqs[i].HostMemoryMB {
					t.Errorf("result %d = %+v, want a cpu-core allocation of the request's cores and memory", i, r)
				}
			}
		})
	}
}
