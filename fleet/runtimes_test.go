package fleet_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"modelplane/artifact"
	"modelplane/busapi"
	"modelplane/fleet"
	"modelplane/registry"
)

// vllmEndpoint registers model llama with a vLLM version l1 (one GPU,
// 40 GB) and an endpoint llama-ep of n replicas serving it.
func (f *fixture) vllmEndpoint(t *testing.T, n int32) {
	t.Helper()
	store, err := artifact.NewStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	reg := registry.New(f.pool, store, artifact.Limits{})
	if _, err := reg.CreateModel(t.Context(), f.eng, registry.ModelSpec{Team: "risk", Name: "llama", Task: registry.TaskLLM}); err != nil {
		t.Fatal(err)
	}
	man := []byte(`{"model.safetensors":"` + strings.Repeat("ab", 32) + `"}`)
	if _, err := reg.RegisterVersion(t.Context(), f.eng, "llama", registry.VersionSpec{Name: "l1", Runtime: "vllm", Format: "safetensors",
		ArtifactURI: "s3://models/llama/l1", Resources: registry.Resources{GPUCount: 1, GPUMemoryMB: 40960}}, man, nil); err != nil {
		t.Fatal(err)
	}
	f.endpoint(t, "llama-ep", "llama", "l1", "gpu-a100-80gb", "standard", n)
}

// beat records a heartbeat of a node reporting runtimes (nil: an agent
// that does not say) and returns whether placement has something new.
func (f *fixture) beat(t *testing.T, node string, inv []busapi.GPU, runtimes ...string) bool {
	t.Helper()
	changed, err := f.fleet.Observe(t.Context(), busapi.NodeStatus{Node: node, BootID: "b1", LeaseSeconds: 15, GPUs: inv, Runtimes: runtimes})
	if err != nil {
		t.Fatal(err)
	}
	return changed
}

// replicaNodes lists the node of each of the endpoint's replicas.
func replicaNodes(t *testing.T, f *fixture, endpoint string) []string {
	t.Helper()
	var out []string
	for _, r := range f.get(t, endpoint).Replicas {
		out = append(out, r.Node)
	}
	return out
}

// TestVLLMVersionIsPlacedOnlyOnTheNodeThatHasVLLM: of two GPU nodes only
// one reports vllm among its runtimes; both replicas of a vLLM version go
// there, though spreading would have put one on each, and the node without
// it still takes a Triton version.
func TestVLLMVersionIsPlacedOnlyOnTheNodeThatHasVLLM(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.beat(t, "gpu-a", gpus(0, 2, "A100-80GB", nil), "builtin", "triton")
	f.beat(t, "gpu-b", gpus(0, 2, "A100-80GB", nil), "builtin", "triton", "vllm")
	f.vllmEndpoint(t, 2)
	f.endpoint(t, "fraud-ep", "fraud", "v1", "gpu-a100-80gb", "standard", 2)
	if p := f.reconcile(t); p.Placed != 4 || p.Unplaced != 0 {
		t.Fatalf("pass = %+v, want 4 placed", p)
	}
	if got := replicaNodes(t, f, "llama-ep"); fmt.Sprint(got) != "[gpu-b gpu-b]" {
		t.Fatalf("llama-ep replicas on %v, want both on gpu-b, the node with vllm", got)
	}
	if got := replicaNodes(t, f, "fraud-ep"); !strings.Contains(fmt.Sprint(got), "gpu-a") {
		t.Errorf("fraud-ep replicas on %v, want one on gpu-a, which runs triton", got)
	}
	if e := f.get(t, "llama-ep"); e.PlacementError != "" {
		t.Errorf("placement error = %q, want none", e.PlacementError)
	}
}

// TestVLLMVersionNowhereIsUnplaceableUntilANodeReportsIt: no GPU node
// reports vllm, so the version is unplaced with the reason on the
// endpoint; a heartbeat that repeats the runtimes changes nothing; once
// a node reports vllm (installed there), that heartbeat wakes placement
// and the next pass puts the replica on it.
func TestVLLMVersionNowhereIsUnplaceableUntilANodeReportsIt(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	for _, n := range []string{"gpu-a", "gpu-b", "gpu-c"} {
		f.beat(t, n, gpus(0, 1, "A100-80GB", nil), "builtin", "triton")
	}
	f.vllmEndpoint(t, 1)
	if p := f.reconcile(t); p.Placed != 0 || p.Unplaced != 1 {
		t.Fatalf("pass = %+v, want the vLLM replica unplaced", p)
	}
	e := f.get(t, "llama-ep")
	want := "l1: no node can run vllm (installed on none of 3 GPU nodes)"
	if e.Status != fleet.StatusUnplaced || e.PlacementError != want || len(e.Replicas) != 0 {
		t.Fatalf("llama-ep = %s %q with %d replicas, want unplaced with %q", e.Status, e.PlacementError, len(e.Replicas), want)
	}

	if f.beat(t, "gpu-b", gpus(0, 1, "A100-80GB", nil), "triton", "builtin") {
		t.Error("a heartbeat repeating the node's runtimes (in another order) reported a change")
	}
	var stored []string
	if err := f.pool.QueryRow(t.Context(), "SELECT runtimes FROM nodes WHERE name = 'gpu-b'").Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(stored) != "[builtin triton]" {
		t.Fatalf("stored runtimes = %v, want [builtin triton]", stored)
	}

	if !f.beat(t, "gpu-b", gpus(0, 1, "A100-80GB", nil), "builtin", "triton", "vllm") {
		t.Fatal("a node reporting a new runtime did not wake placement")
	}
	if p := f.reconcile(t); p.Placed != 1 {
		t.Fatalf("pass = %+v, want the replica placed once gpu-b has vllm", p)
	}
	if got := replicaNodes(t, f, "llama-ep"); fmt.Sprint(got) != "[gpu-b]" {
		t.Fatalf("llama-ep replicas on %v, want gpu-b", got)
	}
	n, err := f.fleet.Node(t.Context(), f.root, "gpu-b")
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(n.Runtimes) != "[builtin triton vllm]" {
		t.Errorf("node gpu-b shows runtimes %v, want [builtin triton vllm]", n.Runtimes)
	}
	if e := f.get(t, "llama-ep"); e.PlacementError != "" {
		t.Errorf("placement error = %q after the replica was placed, want none", e.PlacementError)
	}
}

// TestNodeThatDoesNotSayItsRuntimesTakesAnyVersion: an agent from before
// nodes reported runtimes (no field) keeps getting every version, and a
// simulated node ("*") runs every runtime; a node that said and then
// stops saying is unfiltered again.
func TestNodeThatDoesNotSayItsRuntimesTakesAnyVersion(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.beat(t, "gpu-old", gpus(0, 1, "A100-80GB", nil))
	f.beat(t, "gpu-sim", gpus(0, 1, "A100-80GB", nil), busapi.AnyRuntime)
	f.vllmEndpoint(t, 2)
	if p := f.reconcile(t); p.Placed != 2 {
		t.Fatalf("pass = %+v, want both replicas placed", p)
	}
	if got := replicaNodes(t, f, "llama-ep"); fmt.Sprint(got) != "[gpu-old gpu-sim]" && fmt.Sprint(got) != "[gpu-sim gpu-old]" {
		t.Fatalf("llama-ep replicas on %v, want one on each node", got)
	}
	var isNull bool
	if err := f.pool.QueryRow(t.Context(), "SELECT runtimes IS NULL FROM nodes WHERE name = 'gpu-old'").Scan(&isNull); err != nil || !isNull {
		t.Fatalf("runtimes of the node that did not say: NULL = %t (%v), want NULL", isNull, err)
	}
	// A node that reports an empty list runs nothing: stored as such, not
	// as "not said".
	f.beat(t, "gpu-none", gpus(0, 1, "A100-80GB", nil), []string{}...)
	if err := f.pool.QueryRow(t.Context(), "SELECT runtimes IS NULL FROM nodes WHERE name = 'gpu-none'").Scan(&isNull); err != nil || isNull {
		t.Fatalf("runtimes of a node running none: NULL = %t (%v), want an empty list", isNull, err)
	}
	if f.beat(t, "gpu-none", gpus(0, 1, "A100-80GB", nil), []string{}...) || f.beat(t, "gpu-old", gpus(0, 1, "A100-80GB", nil)) {
		t.Error("a heartbeat repeating no runtimes, or none said, reported a change")
	}
}

func TestHeartbeatWithABadRuntimeNameIsRefused(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	for _, bad := range []string{"", "vllm serve", "a.b/c", strings.Repeat("x", 65), "**"} {
		_, err := f.fleet.Observe(t.Context(), busapi.NodeStatus{Node: "gpu-a", BootID: "b1", LeaseSeconds: 15,
			GPUs: gpus(0, 1, "A100-80GB", nil), Runtimes: []string{"builtin", bad}})
		if !errors.Is(err, fleet.ErrBadStatus) {
			t.Errorf("runtime %q: err = %v, want ErrBadStatus", bad, err)
		}
	}
}
