package cluster_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coder/quartz"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"modelplane/agent/cluster"
	"modelplane/busapi"
	"modelplane/internal/kubetest"
	"modelplane/internal/wait"
)

// TestPoolInventoryFollowsTheNodes: the pool's capacity is the watched
// nodes', recomputed at each change: a GPU node added counts, a MIG
// relayout counts as its new slices, a node cordoned, not Ready or
// removed no longer counts, and an uncordoned one counts again. A CPU
// pool follows its nodes' cores the same way.
func TestPoolInventoryFollowsTheNodes(t *testing.T) {
	t.Parallel()
	c := kubetest.Shared(t)
	d, nodes := pool(t, c, cluster.KindGPU, gpuNode())
	slots := func() map[string]int {
		gpus, _, _ := d.PoolInventory()
		out := map[string]int{}
		for _, g := range gpus {
			for _, s := range g.Slices {
				out[g.Type+"/"+s.Profile]++
			}
		}
		return out
	}
	want := func(full, mig int, what string) {
		t.Helper()
		wait.Eventually(t, time.Minute, func() bool {
			s := slots()
			return s["A100-80GB/"+busapi.ProfileFull] == full && s["A100-80GB/mig-1g.10gb"] == mig
		}, "%s: pool has %v, want %d whole A100s and %d 1g.10gb slices", what, wait.Show(func() any { return slots() }), full, mig)
	}
	want(2, 7, "at start")

	extra := gpuNode()
	extra.Labels = map[string]string{testLabel: uniq(t)}
	added := c.AddNode(t, extra)
	want(4, 14, "a node added")

	// A node of another pool (without the pool's label) is not the pool's.
	c.AddNode(t, gpuNode())
	want(4, 14, "another pool's node added")

	changeNode(t, c, added.Name, func(n *corev1.Node) { n.Spec.Unschedulable = true }, false)
	want(2, 7, "a node cordoned")
	changeNode(t, c, added.Name, func(n *corev1.Node) { n.Spec.Unschedulable = false }, false)
	want(4, 14, "a node uncordoned")

	changeNode(t, c, added.Name, func(n *corev1.Node) {
		for i := range n.Status.Conditions {
			if n.Status.Conditions[i].Type == corev1.NodeReady {
				n.Status.Conditions[i].Status = corev1.ConditionFalse
			}
		}
	}, true)
	want(2, 7, "a node not Ready")

	// The first node's MIG GPU relaid out as two 3g.40gb slices.
	changeNode(t, c, nodes[0].Name, func(n *corev1.Node) {
		delete(n.Status.Allocatable, "nvidia.com/mig-1g.10gb")
		delete(n.Status.Capacity, "nvidia.com/mig-1g.10gb")
		n.Status.Allocatable["nvidia.com/mig-3g.40gb"] = resource.MustParse("2")
		n.Status.Capacity["nvidia.com/mig-3g.40gb"] = resource.MustParse("2")
	}, true)
	wait.Eventually(t, time.Minute, func() bool {
		s := slots()
		return s["A100-80GB/mig-3g.40gb"] == 2 && s["A100-80GB/mig-1g.10gb"] == 0 && s["A100-80GB/"+busapi.ProfileFull] == 2
	}, "MIG relayout: pool has %v, want 2 whole A100s and 2 3g.40gb slices", wait.Show(func() any { return slots() }))

	if err := c.Client().CoreV1().Nodes().Delete(t.Context(), nodes[0].Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	want(0, 0, "every node gone")
}

func TestCPUPoolInventoryFollowsTheNodes(t *testing.T) {
	t.Parallel()
	c := kubetest.Shared(t)
	d, _ := pool(t, c, cluster.KindCPU, kubetest.Node{CPU: "16", Memory: "64Gi"})
	capacity := func() [2]int {
		_, cores, mem := d.PoolInventory()
		return [2]int{cores, mem}
	}
	want := func(cores, mem int, what string) {
		t.Helper()
		wait.Eventually(t, time.Minute, func() bool { return capacity() == [2]int{cores, mem} },
			"%s: pool has %v cores and MiB, want %d and %d", what, wait.Show(func() any { return capacity() }), cores, mem)
	}
	want(16, 64<<10, "at start")
	added := c.AddNode(t, kubetest.Node{CPU: "8", Memory: "16Gi", Labels: map[string]string{testLabel: uniq(t)}})
	want(24, 80<<10, "a node added")
	changeNode(t, c, added.Name, func(n *corev1.Node) { n.Spec.Unschedulable = true }, false)
	want(16, 64<<10, "a node cordoned")
}

// changeNode changes node name's spec (status, when status is set) as a
// person cordoning it or its kubelet would.
func changeNode(t *testing.T, c *kubetest.Cluster, name string, change func(*corev1.Node), status bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := c.Client().CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		change(n)
		if status {
			_, err = c.Client().CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
		} else {
			_, err = c.Client().CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		}
		return err
	})
	if err != nil {
		t.Fatalf("change node %s: %v", name, err)
	}
}

// squat makes someone else's pod on the test's nodes holding n slices of
// MIG profile, and waits until the scheduler bound it.
func squat(t *testing.T, c *kubetest.Cluster, profile string, n int64) {
	t.Helper()
	res := corev1.ResourceList{corev1.ResourceName("nvidia.com/mig-" + profile): *resource.NewQuantity(n, resource.DecimalSI)}
	name := "squatter-" + uniq(t)
	if _, err := c.Client().CoreV1().Pods("default").Create(t.Context(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{NodeSelector: map[string]string{testLabel: uniq(t)},
			Containers: []corev1.Container{{Name: "c", Image: "x", Resources: corev1.ResourceRequirements{Requests: res, Limits: res}}}}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		err := c.Client().CoreV1().Pods("default").Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete %s: %v", name, err)
		}
	})
	c.WaitScheduled(t, "default", name)
}

// TestGPUIndicesStayWhileTheirNodeStays: a pool of two GPU types numbers
// each GPU once. A node added takes the next indices and moves no GPU of
// either type, though its name sorts before every other node's (numbered
// by name, it would push them all up); a node removed moves only the GPUs
// at the top indices into its place, since indices have no holes.
func TestGPUIndicesStayWhileTheirNodeStays(t *testing.T) {
	t.Parallel()
	c := kubetest.Shared(t)
	id := uniq(t)
	const a100, h100 = "NVIDIA-A100-SXM4-80GB", "NVIDIA-H100-80GB-HBM3"
	indexFile := filepath.Join(t.TempDir(), "state", "gpu-indices.json")
	var cfg cluster.Config
	d, nodes := poolWith(t, c, cluster.KindGPU, quartz.NewMock(t), func(c *cluster.Config) { c.IndexFile = indexFile; cfg = *c },
		kubetest.Node{Name: id + "-b", GPUs: 2, GPUProduct: a100, GPUMemoryMiB: 81920},
		kubetest.Node{Name: id + "-c", GPUs: 2, GPUProduct: h100, GPUMemoryMiB: 81920})
	layoutOf := func(d *cluster.Driver) []string {
		gpus, _, _ := d.PoolInventory()
		out := make([]string, len(gpus))
		for i, g := range gpus {
			var ps []string
			for _, s := range g.Slices {
				ps = append(ps, s.Profile)
			}
			out[i] = fmt.Sprintf("%d %s %s", g.Index, g.Type, strings.Join(ps, "+"))
		}
		return out
	}
	layout := func() []string { return layoutOf(d) }
	want := func(what string, want ...string) {
		t.Helper()
		wait.Eventually(t, time.Minute, func() bool { return slices.Equal(layout(), want) },
			"%s: pool's GPUs are %q, want %q", what, wait.Show(func() any { return layout() }), want)
	}
	const mig = "mig-1g.10gb+mig-1g.10gb+mig-1g.10gb+mig-1g.10gb+mig-1g.10gb+mig-1g.10gb+mig-1g.10gb"
	want("at start", "0 A100-80GB full", "1 A100-80GB full", "2 H100-80GB full", "3 H100-80GB full")

	c.AddNode(t, kubetest.Node{Name: id + "-a", GPUs: 1, GPUProduct: a100, GPUMemoryMiB: 81920, MIG: map[string]int{"1g.10gb": 7},
		Labels: map[string]string{testLabel: id}})
	want("a node added", "0 A100-80GB full", "1 A100-80GB full", "2 H100-80GB full", "3 H100-80GB full",
		"4 A100-80GB full", "5 A100-80GB "+mig)

	// A restarted agent's driver, whose first count is by node name,
	// follows the numbering kept in its state directory.
	list, err := c.Client().CoreV1().Nodes().List(t.Context(), metav1.ListOptions{LabelSelector: testLabel + "=" + id})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Inventory, err = cluster.ReadInventory(list.Items, cluster.KindGPU); err != nil {
		t.Fatal(err)
	}
	restarted, err := cluster.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := restarted.Watch(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(restarted.Close)
	if got := layoutOf(restarted); !slices.Equal(got, layout()) {
		t.Fatalf("restarted driver's GPUs are %q, want %q as before", got, layout())
	}

	if err := c.Client().CoreV1().Nodes().Delete(t.Context(), nodes[0].Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	want("the first node removed", "0 A100-80GB full", "1 A100-80GB "+mig, "2 H100-80GB full", "3 H100-80GB full")
}
