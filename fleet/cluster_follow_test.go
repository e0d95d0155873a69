package fleet_test

import (
	"context"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"modelplane/internal/kubetest"
	"modelplane/internal/wait"
)

// TestClusterPoolCapacityFollowsItsNodes: a cluster agent's pool grows
// when a GPU node joins the cluster, with no restart: the replica that did
// not fit is placed, started as a pod on the new node and routed. A node
// cordoned leaves the pool, and placement says the endpoint no longer
// fits. The control plane is the real fleet on PostgreSQL, the cluster a
// real API server and scheduler.
func TestClusterPoolCapacityFollowsItsNodes(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(openDir(t), "fakeruntime")
	if out, err := exec.Command("go", "build", "-o", bin, "../agent/process/testdata/fakeruntime").CombinedOutput(); err != nil {
		t.Fatalf("build fake runtime: %v\n%s", err, out)
	}
	f := newFixture(t)
	a := kubeAgent(t, "node-follow", bin) // one MIG GPU of seven 1g.10gb slices
	c := kubetest.Shared(t)
	slices1g := func() int {
		n := 0
		for _, g := range a.Status().GPUs {
			for _, s := range g.Slices {
				if s.Profile == "mig-1g.10gb" {
					n++
				}
			}
		}
		return n
	}
	f.report(t, a)
	// Eight replicas wanted, seven fit.
	f.endpoint(t, "fraud-ep", "fraud", "v1", "mig-1g.10gb", "critical", 8)
	routed := func(n int, what string) {
		t.Helper()
		var got int
		wait.Eventually(t, 3*time.Minute, func() bool {
			f.report(t, a)
			f.reconcile(t)
			f.deliver(t, a)
			got = 0
			if rt, ok := f.route(t, "fraud-ep"); ok {
				for _, v := range rt.Versions {
					got += len(v.Replicas)
				}
			}
			return got == n
		}, "%s: %v routed replicas, want %d: %v", what, wait.Show(func() any { return got }), n, wait.Show(func() any { return a.Status().Replicas }))
	}
	routed(7, "one node")
	if e := f.get(t, "fraud-ep"); e.PlacementError == "" {
		t.Fatalf("endpoint %+v: eight replicas on seven slices, want a placement note", e)
	}

	// A second GPU node joins the pool: the eighth replica is placed.
	added := c.AddNode(t, kubetest.Node{GPUProduct: "NVIDIA-A100-SXM4-80GB", GPUMemoryMiB: 81920, MIG: map[string]int{"1g.10gb": 7},
		Labels: map[string]string{kubePoolLabel: kubePoolID(t)}})
	wait.Eventually(t, time.Minute, func() bool { return slices1g() == 14 },
		"the pool never counted the new node: %v", wait.Show(func() any { return a.Status().GPUs }))
	routed(8, "a node added")
	wait.Eventually(t, time.Minute, func() bool {
		f.reconcile(t)
		return f.get(t, "fraud-ep").PlacementError == ""
	}, "the endpoint still has a placement note: %v", wait.Show(func() any { return f.get(t, "fraud-ep").PlacementError }))

	// The new node is cordoned: its slices leave the pool, and the eighth
	// replica no longer fits.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := c.Client().CoreV1().Nodes().Get(context.Background(), added.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		n.Spec.Unschedulable = true
		_, err = c.Client().CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	wait.Eventually(t, time.Minute, func() bool { return slices1g() == 7 },
		"the pool still counts the cordoned node: %v", wait.Show(func() any { return a.Status().GPUs }))
	wait.Eventually(t, time.Minute, func() bool {
		f.report(t, a)
		f.reconcile(t)
		return f.get(t, "fraud-ep").PlacementError != ""
	}, "eight replicas on a pool of seven slices, and no placement note")
	if st := a.Status(); len(st.GPUs) != 1 || st.GPUs[0].Type != "A100-80GB" {
		t.Fatalf("pool inventory %+v, want the one MIG GPU of the uncordoned node", st.GPUs)
	}
}
