package deploy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/restmapper"

	"modelplane/internal/kubetest"
)

func TestMain(m *testing.M) { kubetest.Main(m) }

const chart = "helm/modelplane"

// helmVersion is the helm client scripts/kube-tools.sh builds
// (tools/helm/go.mod pins it).
const helmVersion = "v4.3.2"

// helm returns the pinned helm client: $MP_HELM, or the cache
// scripts/kube-tools.sh builds into.
func helm(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("MP_HELM"); p != "" {
		return p
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(cache, "modelplane", "helm-"+helmVersion, "bin", "helm")
	if _, err := os.Stat(p); err != nil {
		if os.Getenv(kubetest.SkipEnv) == "1" {
			t.Skipf("helm is not built (%s); skipped because %s=1", p, kubetest.SkipEnv)
		}
		t.Fatalf("helm is not built (%s): run scripts/kube-tools.sh (make test does)", p)
	}
	return p
}

// render runs helm template for a release named mp in namespace ns.
func render(t *testing.T, ns string, set ...string) []byte {
	t.Helper()
	args := []string{"template", "mp", chart, "--namespace", ns, "--set", "nats.url=nats://nats.nats.svc:4222"}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	out, err := exec.Command(helm(t), args...).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("helm template: %v\n%s", err, ee.Stderr)
		}
		t.Fatal(err)
	}
	return out
}

func TestChartLints(t *testing.T) {
	t.Parallel()
	out, err := exec.Command(helm(t), "lint", "--strict", chart, "--set", "nats.url=nats://nats:4222").CombinedOutput()
	if err != nil {
		t.Fatalf("helm lint: %v\n%s", err, out)
	}
	// Without a NATS URL the chart refuses to render and says why.
	out, err = exec.Command(helm(t), "template", "mp", chart).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "nats.url is required") {
		t.Fatalf("helm template without nats.url: err %v, output %s", err, out)
	}
}

// TestChartAppliesAndTheAgentsRBACSuffices renders the chart, applies
// every object to a real API server (server-side apply, as helm does),
// and then acts as the cluster agent with its own ServiceAccount's token:
// everything the kubernetes driver does is allowed, and the rest refused.
func TestChartAppliesAndTheAgentsRBACSuffices(t *testing.T) {
	t.Parallel()
	c := kubetest.Shared(t)
	ctx := context.Background()
	ns := c.Namespace(t)
	objs := decode(t, render(t, ns, "agent.runtimeImages=vllm=registry.corp/vllm:v1"))

	dc, err := discovery.NewDiscoveryClientForConfig(c.Config())
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	dyn, err := dynamic.NewForConfig(c.Config())
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, o := range objs {
		gvk := o.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			t.Fatalf("%s %s: %v", gvk, o.GetName(), err)
		}
		var ri dynamic.ResourceInterface = dyn.Resource(m.Resource)
		if m.Scope.Name() == meta.RESTScopeNameNamespace {
			ri = dyn.Resource(m.Resource).Namespace(ns)
		}
		data, err := o.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		force := true
		if _, err := ri.Patch(ctx, o.GetName(), types.ApplyPatchType, data, metav1.PatchOptions{FieldManager: "helm", Force: &force}); err != nil {
			t.Fatalf("the API server refused %s %s: %v", gvk.Kind, o.GetName(), err)
		}
		if m.Scope.Name() != meta.RESTScopeNameNamespace {
			t.Cleanup(func() { _ = ri.Delete(context.Background(), o.GetName(), metav1.DeleteOptions{}) })
		}
		kinds[gvk.Kind]++
	}
	for kind, want := range map[string]int{"Deployment": 3, "ServiceAccount": 3, "Service": 2, "ClusterRole": 1, "ClusterRoleBinding": 1, "Job": 1, "PersistentVolumeClaim": 2} {
		if kinds[kind] != want {
			t.Errorf("the chart made %d %s, want %d (all: %v)", kinds[kind], kind, want, kinds)
		}
	}
	// The controllers accept the Deployments: each has its ReplicaSet and
	// pods waiting for a node (there is no node in this test), whose
	// ServiceAccounts exist.
	client := c.Client()
	deps, err := client.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range deps.Items {
		if d.Spec.Template.Spec.ServiceAccountName == "" || d.Spec.Template.Spec.SecurityContext.RunAsNonRoot == nil {
			t.Errorf("deployment %s runs without its ServiceAccount or as root", d.Name)
		}
	}

	// Act as the agent.
	agentNS := ns // the release's namespace
	as, err := kubernetes.NewForConfig(c.ServiceAccountConfig(t, agentNS, "mp-agent"))
	if err != nil {
		t.Fatal(err)
	}
	team := "mp-team-" + ns[strings.LastIndex(ns, "-")+1:]
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("the agent's ServiceAccount may %s, but: %v", what, err)
		}
	}
	refused := func(what string, err error) {
		t.Helper()
		if !apierrors.IsForbidden(err) {
			t.Errorf("the agent's ServiceAccount must not %s: err %v, want Forbidden", what, err)
		}
	}
	_, err = as.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	must("list nodes", err)
	_, err = as.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: team}}, metav1.CreateOptions{})
	must("create a team namespace", err)
	t.Cleanup(func() { _ = client.CoreV1().Namespaces().Delete(context.Background(), team, metav1.DeleteOptions{}) })
	c.WaitServiceAccount(t, team, "default")
	_, err = as.CoreV1().ResourceQuotas(team).Create(ctx, &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Name: "team"},
		Spec:       corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{"requests.nvidia.com/gpu": resource.MustParse("4")}},
	}, metav1.CreateOptions{})
	must("create a ResourceQuota", err)
	_, err = as.CoreV1().Secrets(team).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "pool"}, StringData: map[string]string{"token": "x"}}, metav1.CreateOptions{})
	must("create a Secret in a team namespace", err)
	one := int32(1)
	labels := map[string]string{"app": "v1"}
	dep := &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{Name: "v1", Namespace: team},
		Spec: appsv1.DeploymentSpec{
			Replicas: &one, Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
				Containers: []corev1.Container{{Name: "runtime", Image: "registry.corp/vllm:v1"}}}},
		},
	}
	body, err := json.Marshal(dep)
	must("encode", err)
	_, err = as.AppsV1().Deployments(team).Patch(ctx, "v1", types.ApplyPatchType, body, metav1.PatchOptions{FieldManager: "modelplane"})
	must("server-side apply a Deployment", err)
	np := &networkingv1.NetworkPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: "networking.k8s.io/v1", Kind: "NetworkPolicy"},
		ObjectMeta: metav1.ObjectMeta{Name: "v1", Namespace: team},
		Spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: labels},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}},
				PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"modelplane.dev/gateway": "true"}},
			}}}}},
	}
	body, err = json.Marshal(np)
	must("encode", err)
	_, err = as.NetworkingV1().NetworkPolicies(team).Patch(ctx, "v1", types.ApplyPatchType, body, metav1.PatchOptions{FieldManager: "modelplane"})
	must("server-side apply a NetworkPolicy", err)
	_, err = as.CoreV1().Pods(team).List(ctx, metav1.ListOptions{})
	must("list pods", err)
	w, err := as.CoreV1().Pods(metav1.NamespaceAll).Watch(ctx, metav1.ListOptions{})
	must("watch pods in every namespace", err)
	w.Stop()
	_, err = as.AppsV1().ReplicaSets(team).List(ctx, metav1.ListOptions{})
	must("list ReplicaSets", err)
	_, err = as.CoreV1().Events(team).List(ctx, metav1.ListOptions{})
	must("list events", err)

	_, err = as.CoreV1().Nodes().Patch(ctx, "any", types.MergePatchType, []byte(`{"metadata":{"labels":{"x":"y"}}}`), metav1.PatchOptions{})
	refused("change a node", err)
	_, err = as.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "escalate-" + ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "mp-agent", Namespace: ns}},
	}, metav1.CreateOptions{})
	refused("bind itself to cluster-admin", err)
	_, err = as.CoreV1().Pods(team).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "direct"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x"}}}}, metav1.CreateOptions{})
	refused("create pods directly (it writes Deployments)", err)
	_, err = as.CoreV1().ConfigMaps("kube-system").List(ctx, metav1.ListOptions{})
	refused("read ConfigMaps", err)

	// The server and the gateways have no rights in the API at all.
	for _, sa := range []string{"mp-server", "mp-gateway"} {
		other, err := kubernetes.NewForConfig(c.ServiceAccountConfig(t, ns, sa))
		if err != nil {
			t.Fatal(err)
		}
		_, err = other.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		refused(sa+": list pods", err)
	}

	must("delete a team namespace", as.CoreV1().Namespaces().Delete(ctx, team, metav1.DeleteOptions{}))
}

// decode splits helm's output into objects.
func decode(t *testing.T, manifest []byte) []*unstructured.Unstructured {
	t.Helper()
	var out []*unstructured.Unstructured
	d := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(manifest), 4096)
	for {
		var o unstructured.Unstructured
		if err := d.Decode(&o.Object); err != nil {
			if err == io.EOF {
				return out
			}
			t.Fatal(err)
		}
		if len(o.Object) > 0 {
			out = append(out, &o)
		}
	}
}
