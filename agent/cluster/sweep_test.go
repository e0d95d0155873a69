package cluster_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/coder/quartz"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"modelplane/agent"
	"modelplane/agent/cluster"
	"modelplane/bus"
	"modelplane/busapi"
	"modelplane/internal/kubetest"
	"modelplane/internal/natstest"
	"modelplane/internal/wait"
)

// TestSweepRemovesWhatNoReplicaOwns: an agent whose state directory was
// lost finds the pods, token Secrets and NetworkPolicies its pool made
// before. It removes nothing until the control plane's desired state
// arrives; then it takes over the pod of the replica that state names,
// removes the others of its pool, and leaves another pool's objects and
// objects without the pool's labels alone. Restarted with its state file,
// the replayed desired state sweeps again.
func TestSweepRemovesWhatNoReplicaOwns(t *testing.T) {
	t.Parallel()
	c := kubetest.Shared(t)
	first, nodes := pool(t, c, cluster.KindGPU, gpuNode())
	ctx := t.Context()
	poolName := "pool-" + uniq(t)
	ns := cluster.Namespace(first.NamespacePrefix(), "risk")
	core, netv1 := c.Client().CoreV1(), c.Client().NetworkingV1()

	kept := migSpec("fraud-v1-r1", 0)
	stray := migSpec("fraud-v1-r2", 1) // kept's version: its policy stays
	strayV2 := migSpec("fraud-v2-r1", 2)
	strayV2.Version = "v2" // a version nobody wants: its policy goes
	for _, s := range []busapi.ReplicaSpec{kept, stray, strayV2} {
		if _, err := first.Start(ctx, s, agent.StartOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	keptPod, strayPod, strayV2Pod := podOf(t, c, kept, first).Name, podOf(t, c, stray, first).Name, podOf(t, c, strayV2, first).Name
	// Another pool's replica in the same team namespace.
	// It serves kept's version too: pools share the team's namespace.
	otherPool := "other-" + uniq(t)
	other := driverOf(t, c, otherPool, first.NamespacePrefix(), nodes)
	otherSpec := migSpec("fraud-v1-r9", 3)
	if _, err := other.Start(ctx, otherSpec, agent.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	otherPod := podOf(t, c, otherSpec, other).Name
	other.Close()
	// A pod and a Secret without the pool's labels, named like a replica's.
	c.WaitServiceAccount(t, ns, cluster.ReplicaAccount)
	hand := metav1.ObjectMeta{Name: "by-hand", Labels: map[string]string{cluster.LabelReplica: "fraud-v1-r3"},
		Annotations: map[string]string{cluster.AnnotationReplica: "fraud-v1-r3"}}
	if _, err := core.Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: hand, Spec: corev1.PodSpec{ServiceAccountName: cluster.ReplicaAccount,
		Containers: []corev1.Container{{Name: "c", Image: "x"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := core.Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: hand}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The agent and its state are gone; the pods run on.
	first.Close()

	_, nc := natstest.Connect(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := bus.Ensure(ctx, js); err != nil {
		t.Fatal(err)
	}
	stateDir := t.TempDir()
	d, a := agentOf(t, c, nc, poolName, first.NamespacePrefix(), nodes, stateDir)
	wait.Eventually(t, time.Minute, func() bool { n := a.Counters(); return n.HeartbeatsSent+n.HeartbeatsFailed > 0 },
		"the agent never ran its first pass")
	if _, err := d.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if n := d.Swept(); n != 0 {
		t.Fatalf("swept %d objects before the first desired state, want 0", n)
	}
	for _, name := range []string{keptPod, strayPod, strayV2Pod, otherPod} {
		if p, err := core.Pods(ns).Get(ctx, name, metav1.GetOptions{}); err != nil || p.DeletionTimestamp != nil {
			t.Fatalf("pod %s before the first desired state: %v, %v; want it untouched", name, err, p)
		}
	}

	kv, err := js.KeyValue(ctx, busapi.BucketDesired)
	if err != nil {
		t.Fatal(err)
	}
	desired, _ := json.Marshal(busapi.Desired{Node: poolName, Generation: 1, Replicas: []busapi.ReplicaSpec{kept}})
	if _, err := kv.Put(ctx, poolName, desired); err != nil {
		t.Fatal(err)
	}
	gone := func(get func() error) bool { return apierrors.IsNotFound(get()) }
	wait.Eventually(t, time.Minute, func() bool {
		return gone(func() error { _, err := core.Pods(ns).Get(ctx, strayPod, metav1.GetOptions{}); return err }) &&
			gone(func() error { _, err := core.Pods(ns).Get(ctx, strayV2Pod, metav1.GetOptions{}); return err }) &&
			gone(func() error { _, err := core.Secrets(ns).Get(ctx, strayPod, metav1.GetOptions{}); return err }) &&
			gone(func() error { _, err := core.Secrets(ns).Get(ctx, strayV2Pod, metav1.GetOptions{}); return err }) &&
			gone(func() error {
				_, err := netv1.NetworkPolicies(ns).Get(ctx, cluster.PolicyName(poolName, "fraud", "v2"), metav1.GetOptions{})
				return err
			})
	}, "the strays' pods, tokens and v2 policy were not swept (swept %v)", wait.Show(func() any { return d.Swept() }))
	if n := d.Swept(); n != 5 {
		t.Fatalf("swept %d objects, want 5 (two pods, two tokens, one policy)", n)
	}
	// The named replica is the same pod, taken over, not made twice, and
	// a pass over it keeps it.
	if _, err := d.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	pods, err := core.Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: cluster.LabelReplica + "=" + kept.ID})
	if err != nil || len(pods.Items) != 1 || pods.Items[0].Name != keptPod || pods.Items[0].DeletionTimestamp != nil {
		t.Fatalf("pods of %s: %v, %v; want %s alone, alive", kept.ID, err, podNames(pods), keptPod)
	}
	if n := a.Counters().ReplicaStarts; n != 1 {
		t.Fatalf("agent starts %d, want 1 (the take-over)", n)
	}
	for _, get := range []func() error{
		func() error { _, err := core.Secrets(ns).Get(ctx, keptPod, metav1.GetOptions{}); return err },
		func() error {
			_, err := netv1.NetworkPolicies(ns).Get(ctx, cluster.PolicyName(poolName, "fraud", "v1"), metav1.GetOptions{})
			return err
		},
		func() error { _, err := core.Pods(ns).Get(ctx, otherPod, metav1.GetOptions{}); return err },
		func() error { _, err := core.Secrets(ns).Get(ctx, otherPod, metav1.GetOptions{}); return err },
		func() error {
			_, err := netv1.NetworkPolicies(ns).Get(ctx, cluster.PolicyName(otherPool, "fraud", "v1"), metav1.GetOptions{})
			return err
		},
		func() error { _, err := core.Pods(ns).Get(ctx, "by-hand", metav1.GetOptions{}); return err },
		func() error { _, err := core.Secrets(ns).Get(ctx, "by-hand", metav1.GetOptions{}); return err },
	} {
		if err := get(); err != nil {
			t.Fatalf("an object the sweep must keep: %v", err)
		}
	}

	// Restarted with its state file: the desired state is not new, only
	// replayed, and still arms the sweep, which takes a pod made since.
	a.Stop()
	d.Close()
	maker := driverOf(t, c, poolName, first.NamespacePrefix(), nodes)
	late := migSpec("fraud-v1-r4", 4)
	if _, err := maker.Start(ctx, late, agent.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	latePod := podOf(t, c, late, maker).Name
	maker.Close()
	d2, a2 := agentOf(t, c, nc, poolName, first.NamespacePrefix(), nodes, stateDir)
	wait.Eventually(t, time.Minute, func() bool {
		return gone(func() error { _, err := core.Pods(ns).Get(ctx, latePod, metav1.GetOptions{}); return err })
	}, "the pod made while the agent was down was not swept")
	// Its pod had no address to record, so the agent starts it again from
	// its state file, which takes over the same pod.
	wait.Eventually(t, time.Minute, func() bool { n := a2.Counters(); return n.ReplicaStarts+n.ReplicaAdoptions == 1 },
		"the restarted agent never took its replica back")
	if _, err := d2.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	pods, err = core.Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: cluster.LabelReplica + "=" + kept.ID})
	if err != nil || len(pods.Items) != 1 || pods.Items[0].Name != keptPod || pods.Items[0].DeletionTimestamp != nil {
		t.Fatalf("pods of %s after the restart: %v, %v; want %s alone, alive", kept.ID, err, podNames(pods), keptPod)
	}
	if n := d2.Swept(); n != 2 {
		t.Fatalf("restarted driver swept %d objects, want 2 (a pod and its token)", n)
	}
}

// driverOf is a driver of pool name over the test's nodes, configured as
// pool's (a pod made by one is the same spec to the other), its watches
// running until the test ends (or Close).
func driverOf(t *testing.T, c *kubetest.Cluster, name, prefix string, nodes []corev1.Node) *cluster.Driver {
	t.Helper()
	inv, err := cluster.ReadInventory(nodes, cluster.KindGPU)
	if err != nil {
		t.Fatal(err)
	}
	d, err := cluster.New(cluster.Config{Client: c.Client(), Pool: name, Kind: cluster.KindGPU, Inventory: inv,
		NamespacePrefix: prefix, Image: "modelplane/modelplane:test", ControlPlaneURL: "http://cp.example:8080",
		ArtifactToken: func() string { return "artifact-token" }, NodeSelector: map[string]string{testLabel: uniq(t)},
		Clock: quartz.NewMock(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Watch(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	return d
}

// agentOf is a cluster agent of pool name on a new driver, its state in
// stateDir, started.
func agentOf(t *testing.T, c *kubetest.Cluster, nc *nats.Conn, name, prefix string, nodes []corev1.Node, stateDir string) (*cluster.Driver, *agent.Agent) {
	t.Helper()
	d := driverOf(t, c, name, prefix, nodes)
	gpus, _, _ := d.PoolInventory()
	a, err := agent.New(agent.Config{Node: name, GPUs: gpus, StateDir: stateDir, Lease: 15 * time.Second,
		Heartbeat: time.Second, Driver: d, Clock: quartz.NewReal()}, nc, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Stop)
	return d, a
}

func podNames(l *corev1.PodList) []string {
	if l == nil {
		return nil
	}
	var out []string
	for _, p := range l.Items {
		out = append(out, p.Name)
	}
	return out
}
