package kubetest_test

import (
	"context"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"modelplane/internal/kubetest"
	"modelplane/internal/wait"
)

func TestMain(m *testing.M) { kubetest.Main(m) }

var ctx = context.Background()

// gpuProduct is a GPU product label of the test's own (the namespace's
// number), so that pods selecting it never land on another test's nodes.
func gpuProduct(model, ns string) string {
	return model + "-" + ns[strings.LastIndex(ns, "-")+1:]
}

// gpuPod asks for n of resource res on a node with the given GPU product.
func gpuPod(name string, res corev1.ResourceName, n int64, product string) *corev1.Pod {
	q := *resource.NewQuantity(n, resource.DecimalSI)
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{Name: "fetch", Image: "modelplane:test"}},
			Containers: []corev1.Container{{
				Name: "runtime", Image: "modelplane:test",
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{res: q}, Limits: corev1.ResourceList{res: q}},
			}},
		},
	}
	if product != "" {
		p.Spec.NodeSelector = map[string]string{kubetest.LabelGPUProduct: product}
	}
	return p
}

func TestSchedulerBindsGPUPodToTheGPUNode(t *testing.T) {
	t.Parallel()
	c := kubetest.Shared(t)
	ns := c.Namespace(t)
	product := gpuProduct("NVIDIA-H100-80GB-HBM3", ns) // unique, so other tests' nodes never match
	c.AddNode(t, kubetest.Node{})
	gpu := c.AddNode(t, kubetest.Node{GPUs: 2, GPUProduct: product, GPUMemoryMiB: 81559})
	if got := gpu.Status.Allocatable[kubetest.ResourceGPU]; got.Value() != 2 {
		t.Fatalf("node allocatable nvidia.com/gpu = %v, want 2", got.String())
	}

	if _, err := c.Client().CoreV1().Pods(ns).Create(ctx, gpuPod("llm", kubetest.ResourceGPU, 1, product), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p := c.WaitScheduled(t, ns, "llm")
	if p.Spec.NodeName != gpu.Name {
		t.Fatalf("pod bound to %q, want the GPU node %q", p.Spec.NodeName, gpu.Name)
	}
	p = c.MarkRunning(t, p, "")
	if p.Status.Phase != corev1.PodRunning || !strings.HasPrefix(p.Status.PodIP, "127.") {
		t.Fatalf("after MarkRunning: phase %s, pod IP %q; want Running on 127/8", p.Status.Phase, p.Status.PodIP)
	}
	ready := false
	for _, cond := range p.Status.Conditions {
		if cond.Type == corev1.PodReady {
			ready = cond.Status == corev1.ConditionTrue
		}
	}
	if !ready || len(p.Status.InitContainerStatuses) != 1 || !p.Status.ContainerStatuses[0].Ready {
		t.Fatalf("after MarkRunning the pod is not ready: %+v", p.Status)
	}
}

func TestSchedulerReportsUnschedulableWhenNoNodeHasTheMIGSlice(t *testing.T) {
	t.Parallel()
	c := kubetest.Shared(t)
	ns := c.Namespace(t)
	product := gpuProduct("NVIDIA-A100-SXM4-80GB", ns)
	c.AddNode(t, kubetest.Node{GPUProduct: product, MIG: map[string]int{"1g.10gb": 7}})
	slice := corev1.ResourceName(kubetest.MIGPrefix + "3g.40gb")
	if _, err := c.Client().CoreV1().Pods(ns).Create(ctx, gpuPod("big", slice, 1, product), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cond := c.WaitUnschedulable(t, ns, "big")
	if !strings.Contains(cond.Message, "Insufficient "+string(slice)) {
		t.Fatalf("Unschedulable message %q does not name the missing %s", cond.Message, slice)
	}

	// The scheduler tries again when a node that fits appears.
	fits := c.AddNode(t, kubetest.Node{GPUProduct: product, MIG: map[string]int{"3g.40gb": 2}})
	if p := c.WaitScheduled(t, ns, "big"); p.Spec.NodeName != fits.Name {
		t.Fatalf("pod bound to %q, want %q", p.Spec.NodeName, fits.Name)
	}
}

func TestDeploymentQuotaGarbageCollectionAndNamespaceDeletion(t *testing.T) {
	t.Parallel()
	c := kubetest.Shared(t)
	client := c.Client()
	ns := c.Namespace(t)
	product := gpuProduct("NVIDIA-L4", ns)
	c.AddNode(t, kubetest.Node{GPUs: 4, GPUProduct: product})
	c.AutoRun(t, func(p *corev1.Pod) bool { return p.Namespace == ns }, nil)

	// A quota of one GPU: the second replica is refused by admission.
	_, err := client.CoreV1().ResourceQuotas(ns).Create(ctx, &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Name: "team"},
		Spec:       corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{"requests.nvidia.com/gpu": resource.MustParse("1")}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wait.Eventually(t, kubetest.WaitTimeout, func() bool {
		q, err := client.CoreV1().ResourceQuotas(ns).Get(ctx, "team", metav1.GetOptions{})
		return err == nil && q.Status.Hard != nil
	}, "the quota controller never computed the quota's usage")

	two := int32(2)
	labels := map[string]string{"app": "llm"}
	tmpl := gpuPod("", kubetest.ResourceGPU, 1, product)
	dep, err := client.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "llm"},
		Spec: appsv1.DeploymentSpec{
			Replicas: &two,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: tmpl.Spec},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wait.Eventually(t, kubetest.WaitTimeout, func() bool {
		d, err := client.AppsV1().Deployments(ns).Get(ctx, dep.Name, metav1.GetOptions{})
		return err == nil && d.Status.ReadyReplicas == 1
	}, "the deployment never had one ready replica")
	var failure string
	wait.Eventually(t, kubetest.WaitTimeout, func() bool {
		rss, err := client.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{})
		if err != nil || len(rss.Items) != 1 {
			return false
		}
		for _, cond := range rss.Items[0].Status.Conditions {
			if cond.Type == appsv1.ReplicaSetReplicaFailure {
				failure = cond.Message
				return true
			}
		}
		return false
	}, "the ReplicaSet never reported the quota refusing its second pod")
	if !strings.Contains(failure, "exceeded quota") {
		t.Fatalf("ReplicaFailure message %q, want the quota's refusal", failure)
	}

	// Deleting the Deployment deletes its ReplicaSet and pods by their
	// owner references (background garbage collection).
	if err := client.AppsV1().Deployments(ns).Delete(ctx, dep.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	wait.Eventually(t, kubetest.WaitTimeout, func() bool {
		pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		rss, err2 := client.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{})
		return err == nil && err2 == nil && len(pods.Items) == 0 && len(rss.Items) == 0
	}, "the garbage collector left the Deployment's ReplicaSet or pods")

	// A namespace with a running pod in it is deleted in full (the
	// harness finalises the pod as a kubelet would).
	other := c.Namespace(t)
	pod := gpuPod("stays", kubetest.ResourceGPU, 1, product)
	if _, err := client.CoreV1().Pods(other).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.MarkRunning(t, c.WaitScheduled(t, other, "stays"), "")
	if err := client.CoreV1().Namespaces().Delete(ctx, other, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	wait.Eventually(t, kubetest.WaitTimeout, func() bool {
		_, err := client.CoreV1().Namespaces().Get(ctx, other, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	}, "namespace %s was never deleted", other)
}

func TestContainerStatesAsTheKubeletReportsThem(t *testing.T) {
	t.Parallel()
	c := kubetest.Shared(t)
	ns := c.Namespace(t)
	product := gpuProduct("NVIDIA-A10", ns)
	c.AddNode(t, kubetest.Node{GPUs: 3, GPUProduct: product})
	for _, tc := range []struct {
		name   string
		set    func(testing.TB, *corev1.Pod, string) *corev1.Pod
		reason func(corev1.ContainerStatus) string
	}{
		{"oom", c.OOMKilled, func(s corev1.ContainerStatus) string { return s.LastTerminationState.Terminated.Reason }},
		{"crash", c.CrashLoopBackOff, func(s corev1.ContainerStatus) string { return s.State.Waiting.Reason }},
		{"pull", c.ImagePullBackOff, func(s corev1.ContainerStatus) string { return s.State.Waiting.Reason }},
	} {
		if _, err := c.Client().CoreV1().Pods(ns).Create(ctx, gpuPod(tc.name, kubetest.ResourceGPU, 1, product), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		p := c.MarkRunning(t, c.WaitScheduled(t, ns, tc.name), "")
		p = tc.set(t, p, "runtime")
		want := map[string]string{"oom": "OOMKilled", "crash": "CrashLoopBackOff", "pull": "ImagePullBackOff"}[tc.name]
		if got := tc.reason(p.Status.ContainerStatuses[0]); got != want {
			t.Errorf("%s: reason %q, want %q", tc.name, got, want)
		}
		if p.Status.ContainerStatuses[0].Ready {
			t.Errorf("%s: container still ready", tc.name)
		}
	}
}

func TestServiceAccountActsWithinItsRBAC(t *testing.T) {
	t.Parallel()
	c := kubetest.Shared(t)
	client := c.Client()
	ns := c.Namespace(t)
	if _, err := client.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "agent"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "read-pods"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "agent"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "read-pods"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "agent", Namespace: ns}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	as, err := kubernetes.NewForConfig(c.ServiceAccountConfig(t, ns, "agent"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := as.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatalf("the ServiceAccount may list pods, but: %v", err)
	}
	_, err = as.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) {
		t.Fatalf("creating a ConfigMap as the ServiceAccount: err %v, want Forbidden", err)
	}
	if !strings.Contains(err.Error(), "system:serviceaccount:"+ns+":agent") {
		t.Fatalf("the refusal does not name the ServiceAccount: %v", err)
	}
}

func TestAuditCountsAClientsWrites(t *testing.T) {
	t.Parallel()
	c := kubetest.Shared(t)
	client := c.Client()
	ns := c.Namespace(t)
	mark := c.AuditMark(t)
	cm, err := client.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "a"}, Data: map[string]string{"k": "1"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data["k"] = "2"
	if _, err := client.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().ConfigMaps(ns).Get(ctx, "a", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	// The controller manager writes into a new namespace on its own time
	// (root-ca-cert-publisher creates kube-root-ca.crt), so only this
	// client's writes are counted.
	var got []string
	for _, e := range c.AuditSince(t, mark) {
		if e.ObjectRef.Namespace == ns && e.ObjectRef.Resource == "configmaps" && e.User.Username == "kubetest-admin" {
			got = append(got, e.Verb+" "+e.ObjectRef.Name+" by "+e.User.Username)
		}
	}
	want := []string{"create a by kubetest-admin", "update a by kubetest-admin"}
	if strings.Join(got, "; ") != strings.Join(want, "; ") {
		t.Fatalf("audited writes = %q, want %q (reads are not logged)", got, want)
	}
}
