package fleet_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/quartz"
	"github.com/nats-io/nats.go/jetstream"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"modelplane/agent"
	"modelplane/agent/catalog"
	"modelplane/agent/cluster"
	"modelplane/bus"
	"modelplane/busapi"
	"modelplane/endpoint"
	"modelplane/internal/kubetest"
	"modelplane/internal/natstest"
	"modelplane/internal/wait"
)

// conformant is one driver under the conformance suite: an agent of node
// running it, and how to lose one of its replicas behind the agent's back
// (the machine or the cluster ends it, not modelplane).
type conformant struct {
	name  string
	agent func(t *testing.T, node, bin string) nodeAgent
	lose  func(t *testing.T, a nodeAgent, replica string)
	// left names what the driver made for endpoint and has not removed
	// (nil: a driver that makes nothing outside its replicas).
	left func(t *testing.T, a nodeAgent, endpoint string) []string
}

// TestDriverConformance runs one suite against every driver: desired →
// ready → routed, scale up and down, a lost replica replaced, a rollout
// whose candidate is ready before any weight moves to it, and the
// endpoint's deletion leaving nothing of it behind (for the kubernetes
// driver no pod, token Secret or NetworkPolicy of it in any namespace). The
// control plane is the real fleet reconciler on PostgreSQL; each agent
// talks to a real NATS; the kubernetes driver to a real API server and
// scheduler, with the test playing the kubelet by running the fake
// runtime on each pod's loopback IP.
func TestDriverConformance(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(openDir(t), "fakeruntime")
	if out, err := exec.Command("go", "build", "-o", bin, "../agent/process/testdata/fakeruntime").CombinedOutput(); err != nil {
		t.Fatalf("build fake runtime: %v\n%s", err, out)
	}
	stopReplica := func(t *testing.T, a nodeAgent, id string) {
		for _, r := range a.drv.Running() {
			if r.Spec().ID == id {
				if err := r.Stop(context.Background()); err != nil {
					t.Fatal(err)
				}
				return
			}
		}
		t.Fatalf("driver runs no replica %s", id)
	}
	for _, c := range []conformant{
		{"sim", simAgent, stopReplica, nil},
		{"process", func(t *testing.T, node, bin string) nodeAgent { return processAgent(t, node, bin) }, stopReplica, nil},
		{"kubernetes", kubeAgent, deletePod, kubeLeft},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			conform(t, c, bin)
		})
	}
}

func conform(t *testing.T, c conformant, bin string) {
	f := newFixture(t)
	a := c.agent(t, "node-"+c.name, bin)
	f.report(t, a)
	f.endpoint(t, "fraud-ep", "fraud", "v1", "mig-1g.10gb", "critical", 1)

	// routed waits until the routing entry has n ready replicas of
	// version, reporting the agent's heartbeats and delivering its desired
	// state as the intake and the relay would.
	routed := func(version string, n int) busapi.RouteVersion {
		t.Helper()
		var got busapi.RouteVersion
		wait.Eventually(t, 2*time.Minute, func() bool {
			f.report(t, a)
			f.reconcile(t)
			f.deliver(t, a)
			rt, ok := f.route(t, "fraud-ep")
			if !ok {
				return false
			}
			for _, v := range rt.Versions {
				if v.Name == version {
					got = v
					return len(v.Replicas) == n
				}
			}
			return false
		}, "%s never had %d routed replicas: %v", version, n, wait.Show(func() any { return []any{got, a.Status().Replicas} }))
		return got
	}
	running := func(n int) {
		t.Helper()
		wait.Eventually(t, 2*time.Minute, func() bool { return len(a.Status().Replicas) == n && len(a.drv.Running()) == n },
			"agent never ran exactly %d replicas: %v", n, wait.Show(func() any { return a.Status().Replicas }))
	}

	// Desired → ready → routed.
	v := routed("v1", 1)
	if v.Replicas[0].Addr == "" || v.Replicas[0].Token == "" {
		t.Fatalf("routed replica = %+v, want its address and token", v.Replicas[0])
	}

	// Scale up, then down.
	scale := func(n int32) {
		t.Helper()
		if _, err := f.eps.Update(t.Context(), f.eng, "fraud-ep", endpoint.Settings{InstanceProfile: "mig-1g.10gb", MinReplicas: n, MaxReplicas: n,
			Tier: "critical", RetentionDays: 30}); err != nil {
			t.Fatal(err)
		}
	}
	scale(3)
	routed("v1", 3)
	scale(1)
	kept := routed("v1", 1).Replicas[0]
	running(1)

	// A replica lost behind the agent's back is replaced and routed again.
	starts := a.Counters().ReplicaStarts
	c.lose(t, a, kept.ID)
	wait.Eventually(t, 2*time.Minute, func() bool { return a.Counters().ReplicaStarts > starts },
		"lost replica %s never replaced: %v", kept.ID, wait.Show(func() any { return a.Status().Replicas }))
	routed("v1", 1)

	// A rollout: the candidate gets a replica at weight 0, ready and in
	// the routing entry before the weight moves; then the weight moves in
	// one routing write that already lists it.
	if _, err := f.eps.SetTraffic(t.Context(), f.eng, "fraud-ep", []endpoint.Weight{{Version: "v1", Weight: 100}, {Version: "v2", Weight: 0}}); err != nil {
		t.Fatal(err)
	}
	warm := routed("v2", 1)
	if warm.Weight != 0 {
		t.Fatalf("candidate = %+v, want weight 0 while it warms", warm)
	}
	if _, err := f.eps.SetTraffic(t.Context(), f.eng, "fraud-ep", []endpoint.Weight{{Version: "v1", Weight: 0}, {Version: "v2", Weight: 100}}); err != nil {
		t.Fatal(err)
	}
	f.reconcile(t)
	rt, _ := f.route(t, "fraud-ep")
	i := slices.IndexFunc(rt.Versions, func(v busapi.RouteVersion) bool { return v.Name == "v2" })
	if i < 0 || rt.Versions[i].Weight != 100 || len(rt.Versions[i].Replicas) != 1 || rt.Versions[i].Replicas[0].ID != warm.Replicas[0].ID {
		t.Fatalf("route after the weight moved = %+v, want v2 at 100 with its warmed replica %s", rt.Versions, warm.Replicas[0].ID)
	}

	// The endpoint deleted: its route goes, its replicas stop, and
	// nothing the driver made for it is left.
	if c.left != nil && len(c.left(t, a, "fraud-ep")) == 0 {
		t.Fatal("no object of the endpoint found while it runs: the check below would see nothing")
	}
	if err := f.eps.Delete(t.Context(), f.eng, "fraud-ep"); err != nil {
		t.Fatal(err)
	}
	var left []string
	wait.Eventually(t, 2*time.Minute, func() bool {
		f.report(t, a)
		f.reconcile(t)
		f.deliver(t, a)
		if c.left != nil {
			left = c.left(t, a, "fraud-ep")
		}
		_, routed := f.route(t, "fraud-ep")
		return !routed && len(a.Status().Replicas) == 0 && len(a.drv.Running()) == 0 && len(left) == 0
	}, "the deleted endpoint left replicas or objects: %v", wait.Show(func() any { return []any{a.Status().Replicas, left} }))
}

// kubeLeft lists the pods, Secrets and NetworkPolicies the pool's driver
// made for endpoint, in every namespace.
func kubeLeft(t *testing.T, a nodeAgent, endpoint string) []string {
	t.Helper()
	c := kubetest.Shared(t)
	sel := metav1.ListOptions{LabelSelector: cluster.LabelPool + "=" + a.node + "," + cluster.LabelEndpoint + "=" + endpoint}
	var out []string
	pods, err := c.Client().CoreV1().Pods("").List(t.Context(), sel)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		out = append(out, "pod "+p.Namespace+"/"+p.Name)
	}
	secs, err := c.Client().CoreV1().Secrets("").List(t.Context(), sel)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range secs.Items {
		out = append(out, "secret "+s.Namespace+"/"+s.Name)
	}
	pols, err := c.Client().NetworkingV1().NetworkPolicies("").List(t.Context(), sel)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pols.Items {
		out = append(out, "networkpolicy "+p.Namespace+"/"+p.Name)
	}
	return out
}

// simAgent is a node agent with the simulated driver.
func simAgent(t *testing.T, node, _ string) nodeAgent {
	t.Helper()
	drv := agent.NewSimDriver(agent.SimDriverConfig{Log: slog.New(slog.DiscardHandler)})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		drv.Close(ctx)
	})
	inv, err := agent.ParseInventory([]string{"1xA100-80GB"}, "0:7x1g.10gb")
	if err != nil {
		t.Fatal(err)
	}
	return startAgent(t, agent.Config{Node: node, GPUs: inv}, drv)
}

// startAgent starts an agent of cfg on drv with a NATS of its own.
func startAgent(t *testing.T, cfg agent.Config, drv agent.Driver) nodeAgent {
	t.Helper()
	_, nc := natstest.Connect(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := bus.Ensure(t.Context(), js); err != nil {
		t.Fatal(err)
	}
	cfg.StateDir, cfg.Lease, cfg.Heartbeat = t.TempDir(), 15*time.Second, time.Second
	cfg.Driver = drv
	if _, pool := drv.(agent.PoolDriver); !pool {
		// As processAgent: the node does not list its runtimes, so the
		// fixture's triton versions are placed on it. The cluster driver
		// lists its catalogue, where the fake runtime is the triton entry.
		cfg.Driver = unlisted{drv}
	}
	a, err := agent.New(cfg, nc, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Stop)
	kv, err := js.KeyValue(t.Context(), busapi.BucketDesired)
	if err != nil {
		t.Fatal(err)
	}
	return nodeAgent{Agent: a, node: cfg.Node, kv: kv, drv: drv}
}

// kubeAgent is a cluster agent whose pool is one MIG node of the shared
// test cluster; the test plays its kubelet, running the fake runtime on
// each bound pod's IP with the arguments the pod names.
func kubeAgent(t *testing.T, node, bin string) nodeAgent {
	t.Helper()
	c := kubetest.Shared(t)
	id := kubePoolID(t)
	n := c.AddNode(t, kubetest.Node{GPUProduct: "NVIDIA-A100-SXM4-80GB", GPUMemoryMiB: 81920, MIG: map[string]int{"1g.10gb": 7},
		Labels: map[string]string{kubePoolLabel: id}})
	inv, err := cluster.ReadInventory([]corev1.Node{*n}, cluster.KindGPU)
	if err != nil {
		t.Fatal(err)
	}
	fake := catalog.Entry{Name: "fake", Image: "fake:test", Command: []string{bin, "-host", "{host}", "-port", "{port}", "-model-dir", "{model_dir}"},
		Health: "/v2/health/live", Ready: "/v2/health/ready", Metrics: "/metrics", Adapter: catalog.AdapterTriton}
	drv, err := cluster.New(cluster.Config{Client: c.Client(), Pool: node, Kind: cluster.KindGPU, Inventory: inv,
		NamespacePrefix: id + "-", Image: "modelplane/modelplane:test", Catalog: map[string]catalog.Entry{catalog.Triton: fake},
		NodeSelector: map[string]string{kubePoolLabel: id}, Clock: quartz.NewReal()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := drv.Watch(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); drv.Close() })
	models := openDir(t)
	c.AutoRun(t, func(p *corev1.Pod) bool {
		if p.Labels[cluster.LabelManagedBy] != cluster.ManagedBy {
			return false
		}
		// Any node of the pool: a test may add some.
		node, err := c.Client().CoreV1().Nodes().Get(context.Background(), p.Spec.NodeName, metav1.GetOptions{})
		return err == nil && node.Labels[kubePoolLabel] == id
	}, func(p *corev1.Pod) {
		ctr := p.Spec.Containers[0]
		args := slices.Clone(ctr.Args)
		for i := range args {
			switch {
			case i > 0 && args[i-1] == "-host":
				args[i] = p.Status.PodIP
			case i > 0 && args[i-1] == "-model-dir":
				args[i] = models
			}
		}
		cmd := exec.Command(ctr.Command[0], args...)
		// A test binary that dies leaves no runtime on the pod's address.
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			t.Errorf("run pod %s: %v", p.Name, err)
			return
		}
		go func() { _ = cmd.Wait() }()
		t.Cleanup(func() { _ = cmd.Process.Kill() })
	})
	t.Cleanup(func() {
		list, err := c.Client().CoreV1().Namespaces().List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return
		}
		for _, ns := range list.Items {
			if len(ns.Name) > len(id) && ns.Name[:len(id)+1] == id+"-" {
				_ = c.Client().CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{})
			}
		}
	})
	return startAgent(t, agent.Config{Node: node, GPUs: inv.GPUs}, drv)
}

// kubePoolLabel marks the nodes of a test's pool: the cluster is shared.
const kubePoolLabel = "test.modelplane.io/pool"

// kubePoolID is the value of kubePoolLabel on the test's nodes, and the
// start of its namespaces.
func kubePoolID(t *testing.T) string {
	sum := sha256.Sum256([]byte(t.Name()))
	return "c" + hex.EncodeToString(sum[:])[:8]
}

// deletePod deletes the replica's pod, as a person or an eviction would.
func deletePod(t *testing.T, a nodeAgent, id string) {
	t.Helper()
	c := kubetest.Shared(t)
	list, err := c.Client().CoreV1().Pods("").List(t.Context(), metav1.ListOptions{LabelSelector: cluster.LabelReplica + "=" + id + "," + cluster.LabelPool + "=" + a.node})
	if err != nil || len(list.Items) == 0 {
		t.Fatalf("pod of %s: %v (%d found)", id, err, len(list.Items))
	}
	p := list.Items[0]
	if err := c.Client().CoreV1().Pods(p.Namespace).Delete(t.Context(), p.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestClusterQuotaRefusalIsShownOnTheEndpoint: the team's quota reaches
// the cluster as its namespace's ResourceQuota; when something else in the
// namespace holds it, the API server refuses the replica's pod, and the
// endpoint shows the replica failed with the API server's reason.
func TestClusterQuotaRefusalIsShownOnTheEndpoint(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(openDir(t), "fakeruntime")
	if out, err := exec.Command("go", "build", "-o", bin, "../agent/process/testdata/fakeruntime").CombinedOutput(); err != nil {
		t.Fatalf("build fake runtime: %v\n%s", err, out)
	}
	f := newFixture(t)
	if _, err := f.quotas.Set(t.Context(), f.root, "risk", "A100-80GB", 1); err != nil {
		t.Fatal(err)
	}
	a := kubeAgent(t, "node-quota", bin)
	drv := a.drv.(*cluster.Driver)
	c := kubetest.Shared(t)
	ns := cluster.Namespace(drv.NamespacePrefix(), "risk")
	f.report(t, a)
	f.endpoint(t, "fraud-ep", "fraud", "v1", "mig-1g.10gb", "critical", 1)
	f.reconcile(t)
	f.deliver(t, a)
	// The first replica makes the namespace and its quota (a 1-GPU quota
	// is seven 1g.10gb slices).
	var rq *corev1.ResourceQuota
	wait.Eventually(t, time.Minute, func() bool {
		list, err := c.Client().CoreV1().ResourceQuotas(ns).List(t.Context(), metav1.ListOptions{})
		if err != nil || len(list.Items) == 0 {
			return false
		}
		rq = &list.Items[0]
		q := rq.Status.Hard["requests.nvidia.com/mig-1g.10gb"]
		return q.Value() == 7
	}, "no namespace quota from the team's quota: %v", wait.Show(func() any { return rq }))
	// Someone else's pod in the team's namespace takes the other six. It
	// runs as the namespace's replica account, which the driver may make
	// after the quota.
	c.WaitServiceAccount(t, ns, cluster.ReplicaAccount)
	res := corev1.ResourceList{"nvidia.com/mig-1g.10gb": resource.MustParse("6")}
	if _, err := c.Client().CoreV1().Pods(ns).Create(t.Context(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "squatter"},
		Spec: corev1.PodSpec{ServiceAccountName: cluster.ReplicaAccount,
			Containers: []corev1.Container{{Name: "c", Image: "x", Resources: corev1.ResourceRequirements{Requests: res, Limits: res}}}}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The endpoint wants a second replica; its pod is refused.
	if _, err := f.eps.Update(t.Context(), f.eng, "fraud-ep", endpoint.Settings{InstanceProfile: "mig-1g.10gb", MinReplicas: 2, MaxReplicas: 2,
		Tier: "critical", RetentionDays: 30}); err != nil {
		t.Fatal(err)
	}
	var reps []endpoint.Replica
	wait.Eventually(t, 2*time.Minute, func() bool {
		f.report(t, a)
		f.reconcile(t)
		f.deliver(t, a)
		reps = f.get(t, "fraud-ep").Replicas
		for _, r := range reps {
			if r.State == busapi.StateFailed && strings.Contains(r.Reason, "exceeded quota") {
				return true
			}
		}
		return false
	}, "no replica of the endpoint shows the quota's refusal: %v", wait.Show(func() any { return reps }))
}
