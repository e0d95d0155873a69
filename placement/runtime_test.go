package placement

import (
	"fmt"
	"testing"

	"modelplane/busapi"
)

// runs is n with the runtimes its heartbeat reports.
func runs(n Node, runtimes ...string) Node {
	if runtimes == nil {
		runtimes = []string{}
	}
	n.Runtimes = runtimes
	return n
}

func withRuntime(r Request, runtime string) Request {
	r.Runtime = runtime
	return r
}

func TestPlacementOnlyOnNodesWithTheRuntime(t *testing.T) {
	t.Parallel()
	vllm := func(i int) Request { return withRuntime(rep(i, "chat", "standard", 40960), "vllm") }
	tp := func(i int) Request {
		return Request{Replica: fmt.Sprintf("r%d", i), Endpoint: "big", Tier: "standard", GPUCount: 2, Runtime: "vllm"}
	}
	cpu := func(i int, runtime string) Request { return withRuntime(cpuReq(i, "e", 1, 1024), runtime) }
	tests := []struct {
		name  string
		nodes []Node
		reqs  []Request
		want  []string
	}{
		{"only the node that reports vllm takes a vLLM replica, though the other fits better",
			[]Node{runs(own(node("gpu-a", gpu(0, a100), gpu(1, a100)), 0, 0, "x", "standard"), "triton"), runs(node("gpu-b", gpu(0, a100), gpu(1, a100)), "vllm", "triton")},
			[]Request{vllm(0), vllm(1)}, []string{"gpu-b", "gpu-b"}},
		{"a node that does not say takes anything (an agent from before runtimes were reported)",
			[]Node{node("gpu-a", gpu(0, a100)), runs(node("gpu-b", gpu(0, a100)), "triton")},
			[]Request{vllm(0)}, []string{"gpu-a"}},
		{"a simulated node runs every runtime",
			[]Node{runs(node("gpu-a", gpu(0, a100)), busapi.AnyRuntime)}, []Request{vllm(0)}, []string{"gpu-a"}},
		{"a request naming no runtime goes anywhere",
			[]Node{runs(node("gpu-a", gpu(0, a100)))}, []Request{rep(0, "e", "standard", 4096)}, []string{"gpu-a"}},
		{"no GPU node has vllm: the reason says so",
			[]Node{runs(node("gpu-a", gpu(0, a100)), "triton"), runs(node("gpu-b", gpu(0, a100))), runs(node("gpu-c", gpu(0, h100)), "builtin")},
			[]Request{vllm(0)}, []string{"error: no node can run vllm (installed on none of 3 GPU nodes)"}},
		{"the nodes with vllm are full: the reason says how few have it",
			[]Node{runs(own(node("gpu-a", gpu(0, a100)), 0, 0, "x", "standard"), "vllm"), runs(node("gpu-b", gpu(0, a100)), "triton")},
			[]Request{vllm(0)}, []string{"error: no free mig-3g.40gb, mig-4g.40gb, mig-7g.80gb slice or whole GPU; vllm is installed on only 1 of 2 GPU nodes"}},
		{"tensor parallelism only on a node with the runtime",
			[]Node{runs(node("gpu-a", gpu(0, a100), gpu(1, a100)), "triton"), runs(node("gpu-b", gpu(0, a100), gpu(1, a100)), "vllm")},
			[]Request{tp(0), tp(1)}, []string{"gpu-b", "error: no node with 2 free whole GPUs of one type; vllm is installed on only 1 of 2 GPU nodes"}},
		{"tensor parallelism with vllm nowhere",
			[]Node{runs(node("gpu-a", gpu(0, a100), gpu(1, a100)), "triton")},
			[]Request{tp(0)}, []string{"error: no node can run vllm (installed on none of 1 GPU node)"}},
		{"a CPU replica only on a CPU node with its runtime",
			[]Node{runs(cpuHost("cpu-a", 16, 1<<20), "builtin"), runs(cpuHost("cpu-b", 16, 1<<20), "builtin", "llama-server")},
			[]Request{cpu(0, "llama-server"), cpu(1, "llama-server"), cpu(2, "builtin")}, []string{"cpu-b", "cpu-b", "cpu-a"}},
		{"no CPU node has llama-server: the reason says so",
			[]Node{runs(cpuHost("cpu-a", 16, 1<<20), "builtin"), runs(node("gpu-a", gpu(0, a100)), "llama-server")},
			[]Request{cpu(0, "llama-server")}, []string{"error: no node can run llama-server (installed on none of 1 CPU node)"}},
		{"the CPU nodes with the runtime are full",
			[]Node{runs(cpuHost("cpu-a", 1, 1<<20), "llama-server"), runs(cpuHost("cpu-b", 16, 1<<20), "builtin")},
			[]Request{cpu(0, "llama-server"), cpu(1, "llama-server")},
			[]string{"cpu-a", "error: no CPU node with 1 free cores and 1024 MiB of free memory; llama-server is installed on only 1 of 2 CPU nodes"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := where(Plan(tt.nodes, tt.reqs)); fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("Plan = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestPreemptOnlyWhereTheRuntimeRuns: freeing a GPU of a node without the
// request's runtime would let nothing run, so Preempt looks elsewhere.
func TestPreemptOnlyWhereTheRuntimeRuns(t *testing.T) {
	t.Parallel()
	held := func(name string) Node { return own(node(name, gpu(0, a100)), 0, 0, "nightly", "batch") }
	a, b := held("gpu-a"), held("gpu-b")
	y := Yield{Group: map[string]string{"old-gpu-a-0-0": "nightly", "old-gpu-b-0-0": "nightly"}, Spare: map[string]int{"nightly": 2}}
	r := withRuntime(Request{Replica: "new", Endpoint: "pay", Tier: "critical", MemoryMB: 4096, GPUCount: 1}, "vllm")

	victims, res, ok := Preempt([]Node{runs(a, "triton"), runs(b, "vllm")}, r, y)
	if !ok || fmt.Sprint(victims) != "[old-gpu-b-0-0]" || res.Node != "gpu-b" {
		t.Fatalf("Preempt = %v %+v %t, want gpu-b's holder to give way", victims, res, ok)
	}
	if victims, _, ok := Preempt([]Node{runs(a, "triton"), runs(b)}, r, y); ok {
		t.Fatalf("Preempt = %v, want none: no node runs vllm", victims)
	}
}
