package cluster_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"modelplane/agent"
	"modelplane/agent/cluster"
	"modelplane/busapi"
	"modelplane/internal/kubetest"
	"modelplane/internal/wait"
)

func TestInventoryCountsWholeGPUsAndMIGSlicesOfTheNodes(t *testing.T) {
	t.Parallel()
	n := gpuNode()
	n.Name = "inv-node"
	inv, err := cluster.ReadInventory([]corev1.Node{*n.NodeObject()}, cluster.KindGPU)
	if err != nil {
		t.Fatal(err)
	}
	var full, mig int
	for _, g := range inv.GPUs {
		if g.Type != "A100-80GB" {
			t.Errorf("gpu %d type %q, want A100-80GB", g.Index, g.Type)
		}
		for _, s := range g.Slices {
			switch s.Profile {
			case busapi.ProfileFull:
				full++
			case "mig-1g.10gb":
				mig++
			}
		}
	}
	if full != 2 || mig != 7 {
		t.Fatalf("inventory = %d whole GPUs and %d 1g.10gb slices, want 2 and 7: %+v", full, mig, inv.GPUs)
	}
	if p := inv.Products["A100-80GB"]; !slices.Equal(p, []string{"NVIDIA-A100-SXM4-80GB"}) {
		t.Fatalf("products = %v", p)
	}
	cpu, err := cluster.ReadInventory([]corev1.Node{*kubetest.Node{Name: "cpu", CPU: "16", Memory: "64Gi"}.NodeObject(), *n.NodeObject()}, cluster.KindCPU)
	if err != nil {
		t.Fatal(err)
	}
	if cpu.CPUCores != 16 || cpu.MemoryMB != 64*1024 || len(cpu.GPUs) != 0 {
		t.Fatalf("cpu pool = %d cores, %d MiB, %d GPUs; want the CPU node's 16 and 65536 only", cpu.CPUCores, cpu.MemoryMB, len(cpu.GPUs))
	}
}

func TestObjectsWrittenForAPlacement(t *testing.T) {
	t.Parallel()
	c := kubetest.Shared(t)
	d, nodes := pool(t, c, cluster.KindGPU, gpuNode())
	d.SetTeamQuotas(map[string]map[string]float64{"risk": {"A100-80GB": 2}})
	ctx := t.Context()
	spec := migSpec("fraud-v1-r1", 0)
	if _, err := d.Start(ctx, spec, agent.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	whole := migSpec("fraud-v1-r2", 0)
	whole.Profile, whole.Slots = busapi.ProfileFull, []busapi.Slot{{GPU: 0}, {GPU: 1}}
	if _, err := d.Start(ctx, whole, agent.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	ns := cluster.Namespace(d.NamespacePrefix(), "risk")
	core := c.Client().CoreV1()

	pod := podOf(t, c, spec, d)
	if len(pod.Spec.Containers) != 1 {
		t.Errorf("containers = %d, want the built-in runtime alone: it checks the replica token itself", len(pod.Spec.Containers))
	}
	ctr := pod.Spec.Containers[0]
	if q := ctr.Resources.Requests["nvidia.com/mig-1g.10gb"]; q.Cmp(resource.MustParse("1")) != 0 {
		t.Errorf("requests = %v, want one nvidia.com/mig-1g.10gb", ctr.Resources.Requests)
	}
	if q := ctr.Resources.Limits["nvidia.com/mig-1g.10gb"]; q.Cmp(resource.MustParse("1")) != 0 {
		t.Errorf("limits = %v, want one nvidia.com/mig-1g.10gb", ctr.Resources.Limits)
	}
	if ctr.ReadinessProbe == nil || ctr.ReadinessProbe.HTTPGet.Path != "/v2/health/ready" ||
		ctr.LivenessProbe == nil || ctr.LivenessProbe.HTTPGet.Path != "/v2/health/live" {
		t.Errorf("probes = %+v / %+v, want the V2 health protocol", ctr.ReadinessProbe, ctr.LivenessProbe)
	}
	if ctr.Image != "modelplane/modelplane:test" || !slices.Contains(ctr.Args, "runtime") {
		t.Errorf("runtime container = %s %v, want modelplane's image running the built-in runtime", ctr.Image, ctr.Args)
	}
	tokenFromSecret := false
	for _, e := range ctr.Env {
		if e.Name == "MP_REPLICA_TOKEN" && e.ValueFrom != nil && e.ValueFrom.SecretKeyRef.Name == pod.Name {
			tokenFromSecret = true
		}
	}
	if !tokenFromSecret {
		t.Errorf("env = %+v, want the replica token from the pod's Secret", ctr.Env)
	}
	if len(pod.Spec.InitContainers) != 1 || !slices.Contains(pod.Spec.InitContainers[0].Args, manifest) ||
		pod.Spec.InitContainers[0].Args[0] != "fetch" {
		t.Errorf("init containers = %+v, want modelplane fetch of the manifest", pod.Spec.InitContainers)
	}
	terms := pod.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	affine := false
	for _, e := range terms[0].MatchExpressions {
		if e.Key == cluster.LabelGPUProduct && slices.Equal(e.Values, []string{"NVIDIA-A100-SXM4-80GB"}) {
			affine = true
		}
	}
	if !affine {
		t.Errorf("node affinity = %+v, want the A100's product label", terms)
	}
	if pod.Labels[cluster.LabelPool] == "" || pod.Labels[cluster.LabelEndpoint] != "fraud" || pod.Labels[cluster.LabelVersion] != "v1" ||
		pod.Annotations[cluster.AnnotationReplica] != spec.ID {
		t.Errorf("labels = %v, annotations = %v", pod.Labels, pod.Annotations)
	}
	if len(pod.OwnerReferences) != 1 || pod.OwnerReferences[0].Kind != "NetworkPolicy" || pod.OwnerReferences[0].Name != cluster.PolicyName("pool-"+uniq(t), "fraud", "v1") {
		t.Errorf("owner references = %+v, want the version's NetworkPolicy", pod.OwnerReferences)
	}
	if pod.Spec.ServiceAccountName != cluster.ReplicaAccount || pod.Spec.AutomountServiceAccountToken == nil || *pod.Spec.AutomountServiceAccountToken {
		t.Errorf("service account = %q automount %v, want %s without a token", pod.Spec.ServiceAccountName, pod.Spec.AutomountServiceAccountToken, cluster.ReplicaAccount)
	}
	sec, err := core.Secrets(ns).Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil || string(sec.Data["token"]) != spec.Token || len(sec.OwnerReferences) != 1 {
		t.Errorf("token secret = %+v, %v", sec, err)
	}
	pol, err := c.Client().NetworkingV1().NetworkPolicies(ns).Get(ctx, cluster.PolicyName("pool-"+uniq(t), "fraud", "v1"), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(pol.Spec.Ingress) != 1 || len(pol.Spec.Ingress[0].From) != 2 ||
		pol.Spec.Ingress[0].From[0].PodSelector.MatchLabels[cluster.LabelComponent] != "gateway" ||
		pol.Spec.PodSelector.MatchLabels[cluster.LabelVersion] != "v1" {
		t.Errorf("network policy = %+v, want gateways (and the agent) only, to the version's pods", pol.Spec)
	}
	rq, err := core.ResourceQuotas(ns).Get(ctx, "modelplane-pool-"+uniq(t), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if q := rq.Spec.Hard["requests.nvidia.com/gpu"]; q.Value() != 2 {
		t.Errorf("quota = %v, want 2 whole GPUs", rq.Spec.Hard)
	}
	if q := rq.Spec.Hard["requests.nvidia.com/mig-1g.10gb"]; q.Value() != 14 {
		t.Errorf("quota = %v, want 14 1g.10gb slices (2 GPUs of 7)", rq.Spec.Hard)
	}

	// The scheduler, not modelplane, picks the node.
	if got := c.WaitScheduled(t, ns, pod.Name); got.Spec.NodeName != nodes[0].Name {
		t.Fatalf("pod bound to %q, want the pool's node %s", got.Spec.NodeName, nodes[0].Name)
	}
	w := podOf(t, c, whole, d)
	if q := w.Spec.Containers[0].Resources.Requests[cluster.ResourceGPU]; q.Value() != 2 {
		t.Fatalf("whole-GPU replica requests %v, want 2 nvidia.com/gpu", w.Spec.Containers[0].Resources.Requests)
	}
	c.WaitScheduled(t, ns, w.Name)
}

func TestSecondSyncWritesNothing(t *testing.T) {
	t.Parallel()
	c := kubetest.Shared(t)
	d, _ := pool(t, c, cluster.KindGPU, gpuNode())
	d.SetTeamQuotas(map[string]map[string]float64{"risk": {"A100-80GB": 1}})
	for i := range 2 {
		if _, err := d.Start(t.Context(), migSpec("fraud-v1-r"+string(rune('1'+i)), i), agent.StartOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// Once the watches have seen the driver's own writes, a pass finds
	// everything as it wants it.
	wait.Eventually(t, time.Minute, func() bool { n, err := d.Sync(t.Context()); return err == nil && n == 0 },
		"sync never settled")
	ns := cluster.Namespace(d.NamespacePrefix(), "risk")
	before := versions(t, c, ns)
	mark := c.AuditMark(t)
	n, err := d.Sync(t.Context())
	if err != nil || n != 0 {
		t.Fatalf("second sync wrote %d objects (%v), want none", n, err)
	}
	// Only the driver's own writes count: the controller manager fills a
	// new namespace on its own time (kube-root-ca.crt, the default
	// ServiceAccount).
	for _, e := range c.AuditSince(t, mark) {
		if e.User.Username == "kubetest-admin" && (e.ObjectRef.Namespace == ns || e.ObjectRef.Name == ns) {
			t.Errorf("write after the second sync: %s", e)
		}
	}
	if after := versions(t, c, ns); !mapsEqual(before, after) {
		t.Fatalf("resourceVersions changed:\n%v\n%v", before, after)
	}
}

// versions are the resourceVersions of every object of the namespace the
// driver manages, by kind and name.
func versions(t *testing.T, c *kubetest.Cluster, ns string) map[string]string {
	t.Helper()
	ctx := t.Context()
	out := map[string]string{}
	core := c.Client().CoreV1()
	sel := metav1.ListOptions{LabelSelector: cluster.LabelManagedBy + "=" + cluster.ManagedBy}
	nsObj, err := core.Namespaces().Get(ctx, ns, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out["namespace"] = nsObj.ResourceVersion
	pods, err := core.Pods(ns).List(ctx, sel)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		out["pod/"+p.Name] = p.ResourceVersion
	}
	secs, _ := core.Secrets(ns).List(ctx, sel)
	for _, s := range secs.Items {
		out["secret/"+s.Name] = s.ResourceVersion
	}
	cms, _ := core.ConfigMaps(ns).List(ctx, sel)
	for _, s := range cms.Items {
		out["configmap/"+s.Name] = s.ResourceVersion
	}
	rqs, _ := core.ResourceQuotas(ns).List(ctx, sel)
	for _, s := range rqs.Items {
		out["quota/"+s.Name] = s.ResourceVersion
	}
	pols, _ := c.Client().NetworkingV1().NetworkPolicies(ns).List(ctx, sel)
	for _, s := range pols.Items {
		out["netpol/"+s.Name] = s.ResourceVersion
	}
	if len(out) < 7 {
		t.Fatalf("objects = %v, want the namespace, quota, secrets, version objects and pods", out)
	}
	return out
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func TestObjectChangedByHandIsPutBack(t *testing.T) {
	t.Parallel()
	c := kubetest.Shared(t)
	d, _ := pool(t, c, cluster.KindGPU, gpuNode())
	d.SetTeamQuotas(map[string]map[string]float64{"risk": {"A100-80GB": 1}})
	spec := migSpec("fraud-v1-r1", 0)
	if _, err := d.Start(t.Context(), spec, agent.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ns := cluster.Namespace(d.NamespacePrefix(), "risk")
	pod := podOf(t, c, spec, d)
	net := c.Client().NetworkingV1().NetworkPolicies(ns)
	core := c.Client().CoreV1()
	wait.Eventually(t, time.Minute, func() bool { n, err := d.Sync(ctx); return err == nil && n == 0 }, "sync never settled")

	// Someone opens the policy to everyone, relabels the pod and raises
	// the quota, by hand.
	pol, err := net.Get(ctx, cluster.PolicyName("pool-"+uniq(t), "fraud", "v1"), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pol.Spec.Ingress[0].From = nil
	if _, err := net.Update(ctx, pol, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	p, err := core.Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Labels[cluster.LabelEndpoint] = "someone-elses"
	if _, err := core.Pods(ns).Update(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	rqName := "modelplane-pool-" + uniq(t)
	rq, err := core.ResourceQuotas(ns).Get(ctx, rqName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rq.Spec.Hard["requests.nvidia.com/gpu"] = resource.MustParse("100")
	if _, err := core.ResourceQuotas(ns).Update(ctx, rq, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	// The watches wake the driver: everything is put back without the
	// resync timer (whose clock never moves in this test).
	wait.Eventually(t, time.Minute, func() bool {
		pol, err := net.Get(ctx, cluster.PolicyName("pool-"+uniq(t), "fraud", "v1"), metav1.GetOptions{})
		if err != nil || len(pol.Spec.Ingress) != 1 || len(pol.Spec.Ingress[0].From) != 2 {
			return false
		}
		p, err := core.Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil || p.Labels[cluster.LabelEndpoint] != "fraud" {
			return false
		}
		rq, err := core.ResourceQuotas(ns).Get(ctx, rqName, metav1.GetOptions{})
		q := rq.Spec.Hard["requests.nvidia.com/gpu"]
		return err == nil && q.Value() == 1
	}, "hand edits were not put back")
	if p, _ := core.Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{}); !strings.HasPrefix(p.Name, "fraud-v1-r1-") {
		t.Fatalf("pod %s, want the same pod put back", p.Name)
	}
}
