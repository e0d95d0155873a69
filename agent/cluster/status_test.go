package cluster_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"modelplane/agent"
	"modelplane/agent/cluster"
	"modelplane/busapi"
	"modelplane/internal/kubetest"
	"modelplane/internal/wait"
)

// observed waits until the replica's observation satisfies cond.
func observed(t *testing.T, r agent.Replica, what string, cond func(agent.Observation, error) bool) agent.Observation {
	t.Helper()
	var o agent.Observation
	var err error
	wait.Eventually(t, time.Minute, func() bool {
		o, err = r.Observe(context.Background())
		return cond(o, err)
	}, "%s never observed: %v", what, wait.Show(func() any { return []any{o, err} }))
	return o
}

func TestPodStatusBecomesReplicaState(t *testing.T) {
	t.Parallel()
	c := kubetest.Shared(t)
	d, _ := pool(t, c, cluster.KindGPU, gpuNode())
	ctx := t.Context()
	spec := migSpec("fraud-v1-r1", 0)
	r, err := d.Start(ctx, spec, agent.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ns := cluster.Namespace(d.NamespacePrefix(), "risk")
	pod := c.WaitScheduled(t, ns, podOf(t, c, spec, d).Name)
	o := observed(t, r, "bound and starting", func(o agent.Observation, err error) bool { return err == nil && !o.Unallocated })
	if o.Ready || o.Failures != 0 {
		t.Fatalf("bound pod = %+v, want starting", o)
	}

	// Running and ready: the replica is ready at the pod's IP.
	ip := c.NextPodIP()
	pod = c.MarkRunning(t, pod, ip)
	o = observed(t, r, "ready", func(o agent.Observation, err error) bool { return err == nil && o.Ready })
	if r.Addr() != ip+":8000" {
		t.Fatalf("addr = %q, want %s:8000", r.Addr(), ip)
	}
	if o.ServerName != "" {
		t.Errorf("server name %q of a pod serving plain HTTP, want none", o.ServerName)
	}

	for _, tc := range []struct {
		name string
		do   func() *corev1.Pod
		want string
	}{
		{"OOMKilled", func() *corev1.Pod { return c.OOMKilled(t, pod, "runtime") }, "OOMKilled"},
		{"CrashLoopBackOff", func() *corev1.Pod { return c.CrashLoopBackOff(t, pod, "runtime") }, "CrashLoopBackOff"},
		{"ImagePullBackOff", func() *corev1.Pod { return c.ImagePullBackOff(t, pod, "runtime") }, "ImagePullBackOff"},
	} {
		pod = tc.do()
		o := observed(t, r, tc.name, func(o agent.Observation, err error) bool {
			return err == nil && strings.Contains(o.Reason, tc.want)
		})
		if o.Ready || o.Failures < 1 {
			t.Fatalf("%s: observation = %+v, want failed with the reason", tc.name, o)
		}
		// The portal links a crash loop's reason, and only it, to the
		// runtime's previous run.
		if name, crashed := busapi.CrashedContainer(o.Reason); crashed != (tc.want == "CrashLoopBackOff") || crashed && name != busapi.LogContainerRuntime {
			t.Errorf("%s: CrashedContainer(%q) = %q, %v", tc.name, o.Reason, name, crashed)
		}
	}

	// Evicted: the replica is gone, and the agent replaces it.
	c.Evict(t, pod)
	observed(t, r, "evicted", func(_ agent.Observation, err error) bool { return errors.Is(err, agent.ErrNotRunning) })
}

func TestUnschedulableIsTheSchedulersReason(t *testing.T) {
	t.Parallel()
	c := kubetest.Shared(t)
	d, _ := pool(t, c, cluster.KindGPU, gpuNode())
	spec := migSpec("fraud-v1-r1", 0)
	spec.Profile = "mig-3g.40gb" // no node of the pool has one
	r, err := d.Start(t.Context(), spec, agent.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ns := cluster.Namespace(d.NamespacePrefix(), "risk")
	cond := c.WaitUnschedulable(t, ns, podOf(t, c, spec, d).Name)
	o := observed(t, r, "unschedulable", func(o agent.Observation, err error) bool {
		return err == nil && strings.Contains(o.Reason, "Unschedulable")
	})
	if !o.Unallocated || o.Failures != 1 || !strings.Contains(o.Reason, cond.Message) {
		t.Fatalf("observation = %+v, want unallocated and failed with the scheduler's %q", o, cond.Message)
	}
}

func TestDeletedPodIsLost(t *testing.T) {
	t.Parallel()
	c := kubetest.Shared(t)
	d, _ := pool(t, c, cluster.KindGPU, gpuNode())
	spec := migSpec("fraud-v1-r1", 0)
	r, err := d.Start(t.Context(), spec, agent.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod := podOf(t, c, spec, d)
	observed(t, r, "seen", func(_ agent.Observation, err error) bool { return err == nil })
	if err := c.Client().CoreV1().Pods(pod.Namespace).Delete(t.Context(), pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	observed(t, r, "lost", func(_ agent.Observation, err error) bool { return errors.Is(err, agent.ErrNotRunning) })
	wait.Eventually(t, time.Minute, func() bool {
		_, err := c.Client().CoreV1().Pods(pod.Namespace).Get(t.Context(), pod.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	}, "pod %s never went", pod.Name)
	// The driver does not make it again behind the agent's back: the
	// agent replaces the lost replica with a pod of a new name.
	if _, err := d.Sync(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client().CoreV1().Pods(pod.Namespace).Get(t.Context(), pod.Name, metav1.GetOptions{}); err == nil {
		t.Fatalf("pod %s came back", pod.Name)
	}
}

func TestNamespaceQuotaRefusesAReplica(t *testing.T) {
	t.Parallel()
	c := kubetest.Shared(t)
	d, _ := pool(t, c, cluster.KindCPU, kubetest.Node{CPU: "16", Memory: "64Gi"})
	d.SetTeamQuotas(map[string]map[string]float64{"risk": {"cpu": 2, "memory": 4096}})
	ctx := t.Context()
	if _, err := d.Start(ctx, cpuSpec("scoring-v1-r1", 2, 1024), agent.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	// Until the quota controller has written the quota's status, admission
	// enforces nothing, and a pod admitted then stays: wait until the
	// status counts the first replica's two cores. The second would pass
	// the team's two.
	ns := cluster.Namespace(d.NamespacePrefix(), "risk")
	var used any
	wait.Eventually(t, time.Minute, func() bool {
		list, err := c.Client().CoreV1().ResourceQuotas(ns).List(ctx, metav1.ListOptions{})
		if err != nil || len(list.Items) != 1 {
			return false
		}
		q := list.Items[0].Status.Used[corev1.ResourceRequestsCPU]
		used = q.String()
		return q.Cmp(resource.MustParse("2")) == 0
	}, "quota status never counted the first replica: used %v", wait.Show(func() any { return used }))
	_, err := d.Start(ctx, cpuSpec("scoring-v1-r2", 1, 1024), agent.StartOptions{})
	if err == nil || !strings.Contains(err.Error(), "exceeded quota") {
		t.Fatalf("second replica: %v, want refused by the quota", err)
	}
	if !strings.Contains(err.Error(), "requests.cpu") {
		t.Fatalf("refusal %q does not name the resource", err)
	}
}

func TestStoppingTheLastReplicaRemovesEverythingOfTheVersion(t *testing.T) {
	t.Parallel()
	c := kubetest.Shared(t)
	d, _ := pool(t, c, cluster.KindGPU, gpuNode())
	ctx := t.Context()
	var reps []agent.Replica
	for i, id := range []string{"fraud-v1-r1", "fraud-v1-r2"} {
		r, err := d.Start(ctx, migSpec(id, i), agent.StartOptions{})
		if err != nil {
			t.Fatal(err)
		}
		reps = append(reps, r)
	}
	ns := cluster.Namespace(d.NamespacePrefix(), "risk")
	sel := metav1.ListOptions{LabelSelector: cluster.LabelEndpoint + "=fraud"}
	for _, r := range reps {
		c.MarkRunning(t, c.WaitScheduled(t, ns, podOf(t, c, r.Spec(), d).Name), "")
	}
	for _, r := range reps {
		if err := r.Stop(ctx); err != nil {
			t.Fatal(err)
		}
	}
	waitNoObjects(t, c, ns, sel)
	if n := len(d.Running()); n != 0 {
		t.Fatalf("driver still runs %d replicas", n)
	}
}

// waitNoObjects waits until no pod, Secret, ConfigMap or NetworkPolicy
// of namespace ns matches sel, and names those left when they stay.
func waitNoObjects(t *testing.T, c *kubetest.Cluster, ns string, sel metav1.ListOptions) {
	t.Helper()
	ctx := t.Context()
	core := c.Client().CoreV1()
	var left []string
	wait.Eventually(t, time.Minute, func() bool {
		pods, e1 := core.Pods(ns).List(ctx, sel)
		secs, e2 := core.Secrets(ns).List(ctx, sel)
		cms, e3 := core.ConfigMaps(ns).List(ctx, sel)
		pols, e4 := c.Client().NetworkingV1().NetworkPolicies(ns).List(ctx, sel)
		if err := errors.Join(e1, e2, e3, e4); err != nil {
			left = []string{err.Error()}
			return false
		}
		left = nil
		for _, p := range pods.Items {
			left = append(left, "pod "+p.Name)
		}
		for _, s := range secs.Items {
			left = append(left, "secret "+s.Name)
		}
		for _, m := range cms.Items {
			left = append(left, "configmap "+m.Name)
		}
		for _, p := range pols.Items {
			left = append(left, "networkpolicy "+p.Name)
		}
		return len(left) == 0
	}, "objects of the endpoint remain: %v", wait.Show(func() any { return left }))
}

// TestAResyncBehindStopWritesNothing: the resync loop lists the replicas
// and then writes each; one that Stop removed meanwhile must not be
// written back (CI once saw a resync put back the policy and token the
// last Stop had just deleted, which then stayed).
func TestAResyncBehindStopWritesNothing(t *testing.T) {
	t.Parallel()
	c := kubetest.Shared(t)
	d, _ := pool(t, c, cluster.KindGPU, gpuNode())
	ctx := t.Context()
	r, err := d.Start(ctx, migSpec("fraud-v1-r1", 0), agent.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ns := cluster.Namespace(d.NamespacePrefix(), "risk")
	c.MarkRunning(t, c.WaitScheduled(t, ns, podOf(t, c, r.Spec(), d).Name), "")
	if err := r.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	mark := c.AuditMark(t)
	if err := cluster.Resync(ctx, d, r); err != nil {
		t.Fatal(err)
	}
	for _, e := range c.AuditSince(t, mark) {
		// The harness deletes the stopped pod for good, as a kubelet
		// would; anything else written is the driver's.
		if e.User.Username == "kubetest-admin" && e.ObjectRef.Namespace == ns && e.Verb != "delete" {
			t.Errorf("written after Stop: %s", e)
		}
	}
	waitNoObjects(t, c, ns, metav1.ListOptions{LabelSelector: cluster.LabelEndpoint + "=fraud"})
}

// TestAVersionStartedAgainRightAfterItsLastStop: the version's policy
// the last Stop deleted may still be in the watch's cache when the next
// replica of the version starts; the new pod must belong to the policy
// that exists, or the garbage collector deletes it as an orphan. The
// watches are stopped once they hold the policy, so their cache keeps the
// deleted one for certain.
func TestAVersionStartedAgainRightAfterItsLastStop(t *testing.T) {
	t.Parallel()
	c := kubetest.Shared(t)
	d, _ := pool(t, c, cluster.KindGPU, gpuNode())
	ctx := t.Context()
	first, err := d.Start(ctx, migSpec("fraud-v1-r1", 0), agent.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wait.Eventually(t, time.Minute, func() bool { n, err := d.Sync(ctx); return err == nil && n == 0 },
		"the watches never saw the replica's objects")
	d.Close()
	if err := first.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	next, err := d.Start(ctx, migSpec("fraud-v1-r2", 1), agent.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ns := cluster.Namespace(d.NamespacePrefix(), "risk")
	pol, err := c.Client().NetworkingV1().NetworkPolicies(ns).Get(ctx, cluster.PolicyName("pool-"+uniq(t), "fraud", "v1"), metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the version's policy: %v", err)
	}
	pod := podOf(t, c, next.Spec(), d)
	if len(pod.OwnerReferences) != 1 || pod.OwnerReferences[0].UID != pol.UID {
		t.Fatalf("pod %s owned by %+v, want the live policy %s (uid %s)", pod.Name, pod.OwnerReferences, pol.Name, pol.UID)
	}
}

// TestANewDriverAdoptsThePodsOfTheLastOne: an agent restarted (a new
// driver) takes over the pod made for the same spec instead of starting
// a second, and refuses one made for another spec.
func TestANewDriverAdoptsThePodsOfTheLastOne(t *testing.T) {
	t.Parallel()
	c := kubetest.Shared(t)
	d, _ := pool(t, c, cluster.KindGPU, gpuNode())
	spec := migSpec("fraud-v1-r1", 0)
	first, err := d.Start(t.Context(), spec, agent.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod := podOf(t, c, spec, d)
	next, err := cluster.New(cluster.Config{Client: c.Client(), Pool: "pool-" + uniq(t), Kind: cluster.KindGPU,
		NamespacePrefix: d.NamespacePrefix(), Image: "modelplane/modelplane:test"})
	if err != nil {
		t.Fatal(err)
	}
	if err := next.Watch(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(next.Close)
	var r agent.Replica
	wait.Eventually(t, time.Minute, func() bool { r, err = next.Adopt(t.Context(), spec, first.Addr()); return err == nil },
		"pod never adopted: %v", wait.Show(func() any { return err }))
	if o, err := r.Observe(t.Context()); err != nil || o.Runtime == "" {
		t.Fatalf("adopted replica observes %+v, %v", o, err)
	}
	other := spec
	other.Token = "another-token"
	if _, err := next.Adopt(t.Context(), other, ""); !errors.Is(err, agent.ErrNotRunning) {
		t.Fatalf("adopting another spec's pod: err %v, want ErrNotRunning", err)
	}
	if got := podOf(t, c, spec, d); got.Name != pod.Name {
		t.Fatalf("pod %s, want the same %s", got.Name, pod.Name)
	}
}

// TestTwoPoolsServeOneVersionInATeamsNamespace: pools share a team's
// namespace, so each names its own NetworkPolicy of a version. When one
// pool stops its last replica of the version, the other pool's policy,
// and the pod it owns, stay.
func TestTwoPoolsServeOneVersionInATeamsNamespace(t *testing.T) {
	t.Parallel()
	c := kubetest.Shared(t)
	first, nodes := pool(t, c, cluster.KindGPU, gpuNode())
	second := driverOf(t, c, "second-"+uniq(t), first.NamespacePrefix(), nodes)
	ctx := t.Context()
	ra, err := first.Start(ctx, migSpec("fraud-v1-a", 0), agent.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := second.Start(ctx, migSpec("fraud-v1-b", 1), agent.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	ns := cluster.Namespace(first.NamespacePrefix(), "risk")
	podB := podOf(t, c, migSpec("fraud-v1-b", 1), second)
	if err := ra.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	netv1 := c.Client().NetworkingV1()
	wait.Eventually(t, time.Minute, func() bool {
		_, err := netv1.NetworkPolicies(ns).Get(ctx, cluster.PolicyName("pool-"+uniq(t), "fraud", "v1"), metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	}, "the first pool's policy of fraud v1 remains")
	if len(podB.OwnerReferences) != 1 || podB.OwnerReferences[0].Kind != "NetworkPolicy" {
		t.Fatalf("second pool's pod owners = %+v, want its version's NetworkPolicy", podB.OwnerReferences)
	}
	owner, err := netv1.NetworkPolicies(ns).Get(ctx, podB.OwnerReferences[0].Name, metav1.GetOptions{})
	if err != nil || owner.UID != podB.OwnerReferences[0].UID {
		t.Fatalf("the second pool's pod lost its owner: %v, %v", owner, err)
	}
	if p, err := c.Client().CoreV1().Pods(ns).Get(ctx, podB.Name, metav1.GetOptions{}); err != nil || p.DeletionTimestamp != nil {
		t.Fatalf("the second pool's pod: %v, %v; want it alive", p, err)
	}
}
