package cluster_test

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/quartz"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"modelplane/agent/cluster"
	"modelplane/busapi"
	"modelplane/internal/kubetest"
	"modelplane/internal/wait"
)

// testLabel keeps a test's pods on its own nodes: the cluster is shared.
const testLabel = "test.modelplane.io/pool"

// manifest stands for a version's manifest digest.
const manifest = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// uniq is a short name of the test, for namespaces and labels: the same
// for every call of one run of a test, and new for each run, since a
// namespace the last run (-count=2) deleted may still be terminating.
func uniq(t *testing.T) string {
	if id, ok := ids.Load(t); ok {
		return id.(string)
	}
	sum := sha256.Sum256([]byte(t.Name() + "\x00" + rand.Text()))
	id, _ := ids.LoadOrStore(t, "t"+hex.EncodeToString(sum[:])[:8])
	return id.(string)
}

// ids are the runs' names uniq gave, by test.
var ids sync.Map

// pool registers the test's nodes and returns a driver for them, its
// watches running, its namespaces removed when the test ends.
func pool(t *testing.T, c *kubetest.Cluster, kind string, nodes ...kubetest.Node) (*cluster.Driver, []corev1.Node) {
	t.Helper()
	return poolWithClock(t, c, kind, quartz.NewMock(t), nodes...)
}

// poolWithClock is pool with the driver's clock given.
func poolWithClock(t *testing.T, c *kubetest.Cluster, kind string, clock quartz.Clock, nodes ...kubetest.Node) (*cluster.Driver, []corev1.Node) {
	t.Helper()
	return poolWith(t, c, kind, clock, nil, nodes...)
}

// poolWith is poolWithClock with the driver's configuration changed by
// set (nil: none).
func poolWith(t *testing.T, c *kubetest.Cluster, kind string, clock quartz.Clock, set func(*cluster.Config), nodes ...kubetest.Node) (*cluster.Driver, []corev1.Node) {
	t.Helper()
	id := uniq(t)
	var objs []corev1.Node
	for _, n := range nodes {
		if n.Labels == nil {
			n.Labels = map[string]string{}
		}
		n.Labels[testLabel] = id
		objs = append(objs, *c.AddNode(t, n))
	}
	inv, err := cluster.ReadInventory(objs, kind)
	if err != nil {
		t.Fatal(err)
	}
	cfg := cluster.Config{Client: c.Client(), Pool: "pool-" + id, Kind: kind, Inventory: inv,
		NamespacePrefix: id + "-", Image: "modelplane/modelplane:test", ControlPlaneURL: "http://cp.example:8080",
		ArtifactToken: func() string { return "artifact-token" }, NodeSelector: map[string]string{testLabel: id},
		Clock: clock}
	if set != nil {
		set(&cfg)
	}
	d, err := cluster.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := d.Watch(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		d.Close()
		dctx, dcancel := context.WithTimeout(context.Background(), time.Minute)
		defer dcancel()
		list, err := c.Client().CoreV1().Namespaces().List(dctx, metav1.ListOptions{})
		if err != nil {
			return
		}
		for _, ns := range list.Items {
			if strings.HasPrefix(ns.Name, id+"-") {
				_ = c.Client().CoreV1().Namespaces().Delete(dctx, ns.Name, metav1.DeleteOptions{})
			}
		}
	})
	return d, objs
}

// gpuNode is an A100 node with two whole GPUs and a MIG GPU of seven
// 1g.10gb slices.
func gpuNode() kubetest.Node {
	return kubetest.Node{GPUs: 2, GPUProduct: "NVIDIA-A100-SXM4-80GB", GPUMemoryMiB: 81920, MIG: map[string]int{"1g.10gb": 7}}
}

func migSpec(id string, slot int) busapi.ReplicaSpec {
	return busapi.ReplicaSpec{ID: id, Team: "risk", Endpoint: "fraud", Model: "fraud", Version: "v1", Task: "classification",
		GPUType: "A100-80GB", Profile: "mig-1g.10gb", Slots: []busapi.Slot{{GPU: 2, Slice: slot}}, Runtime: "builtin",
		Manifest: manifest, Token: "token-" + id}
}

func cpuSpec(id string, cores, memMB int) busapi.ReplicaSpec {
	return busapi.ReplicaSpec{ID: id, Team: "risk", Endpoint: "scoring", Model: "scoring", Version: "v1", Task: "classification",
		GPUType: busapi.CPUType, Profile: busapi.ProfileCPU, CPUCores: cores, MemoryMB: memMB, Runtime: "xgboost",
		Manifest: manifest, Token: "token-" + id}
}

// podOf returns the replica's pod as the API server holds it.
func podOf(t *testing.T, c *kubetest.Cluster, spec busapi.ReplicaSpec, d *cluster.Driver) *corev1.Pod {
	t.Helper()
	ns := cluster.Namespace(d.NamespacePrefix(), spec.Team)
	var pod *corev1.Pod
	wait.Eventually(t, time.Minute, func() bool {
		list, err := c.Client().CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: cluster.LabelReplica + "=" + spec.ID})
		if err != nil || len(list.Items) == 0 {
			return false
		}
		pod = &list.Items[0]
		return true
	}, "no pod of replica %s in %s", spec.ID, ns)
	return pod
}
