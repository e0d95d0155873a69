package fleet_test

import (
	"slices"
	"testing"
	"time"

	"github.com/coder/quartz"
	corev1 "k8s.io/api/core/v1"

	"modelplane/agent/cluster"
	"modelplane/busapi"
	"modelplane/internal/kubetest"
	"modelplane/internal/wait"
)

// TestPoolNodeAddedKeepsTheOtherTypesReplicas: a cluster pool of A100s
// and H100s reports an A100 node added as more GPUs, not as GPUs
// renumbered, though the new node's name sorts first: the H100
// replicas keep their slots and are not placed again
// (TestGrownInventoryKeepsItsReplicas for a pool of two types).
func TestPoolNodeAddedKeepsTheOtherTypesReplicas(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	c := kubetest.Shared(t)
	id := kubePoolID(t)
	const a100, h100 = "NVIDIA-A100-SXM4-80GB", "NVIDIA-H100-80GB-HBM3"
	var nodes []corev1.Node
	for _, n := range []kubetest.Node{{Name: id + "-b", GPUs: 2, GPUProduct: a100, GPUMemoryMiB: 81920},
		{Name: id + "-c", GPUs: 2, GPUProduct: h100, GPUMemoryMiB: 81920}} {
		n.Labels = map[string]string{kubePoolLabel: id}
		nodes = append(nodes, *c.AddNode(t, n))
	}
	inv, err := cluster.ReadInventory(nodes, cluster.KindGPU)
	if err != nil {
		t.Fatal(err)
	}
	pool := "pool-" + id
	drv, err := cluster.New(cluster.Config{Client: c.Client(), Pool: pool, Kind: cluster.KindGPU, Inventory: inv,
		NamespacePrefix: id + "-", Image: "modelplane/modelplane:test", NodeSelector: map[string]string{kubePoolLabel: id},
		Clock: quartz.NewMock(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := drv.Watch(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(drv.Close)
	report := func() bool {
		gpus, _, _ := drv.PoolInventory()
		return f.heartbeat(t, pool, gpus)
	}
	report()
	f.endpoint(t, "chat-ep", "chat", "c1", "gpu-h100-80gb", "critical", 2)
	f.reconcile(t)
	placed := func() map[string][]busapi.Slot {
		out := map[string][]busapi.Slot{}
		for _, r := range f.desired(t, pool).Replicas {
			out[r.ID] = r.Slots
		}
		return out
	}
	before := placed()
	if len(before) != 2 {
		t.Fatalf("desired = %v, want the two H100 replicas", before)
	}
	for id, s := range before {
		if len(s) != 1 || s[0].GPU < 2 {
			t.Fatalf("replica %s on %v, want an H100 (GPU 2 or 3)", id, s)
		}
	}

	c.AddNode(t, kubetest.Node{Name: id + "-a", GPUs: 2, GPUProduct: a100, GPUMemoryMiB: 81920, Labels: map[string]string{kubePoolLabel: id}})
	wait.Eventually(t, time.Minute, func() bool { g, _, _ := drv.PoolInventory(); return len(g) == 6 },
		"the pool never counted the added node")
	if !report() {
		t.Fatal("a grown pool must report a change")
	}
	f.reconcile(t)
	after := placed()
	if len(after) != 2 {
		t.Fatalf("desired after growth = %v, want the same two replicas %v", after, before)
	}
	for id, s := range before {
		if !slices.Equal(after[id], s) {
			t.Fatalf("replica %s on %v after an A100 node was added, want it kept on %v (desired %v)", id, after[id], s, after)
		}
	}
}
