package deploy_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/coder/quartz"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/restmapper"

	"modelplane/agent"
	"modelplane/agent/cluster"
	"modelplane/busapi"
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

	// The cluster driver itself, with the ServiceAccount's token, makes a
	// replica's every object (team namespace, quota, account, artifact
	// Secret, policy, token Secret, pod), watches them, and removes them.
	prefix := "mp-" + ns[strings.LastIndex(ns, "-")+1:] + "-"
	drv, err := cluster.New(cluster.Config{Client: as, Pool: "chart-" + ns, Kind: cluster.KindCPU, NamespacePrefix: prefix,
		Image: "registry.corp/modelplane:1", ControlPlaneURL: "http://mp-server:8080", ArtifactToken: func() string { return "t" },
		Clock: quartz.NewReal()})
	must("build the driver", err)
	dctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	must("watch its objects", drv.Watch(dctx))
	t.Cleanup(drv.Close)
	drv.SetTeamQuotas(map[string]map[string]float64{"risk": {"cpu": 4, "memory": 8192}})
	team := cluster.Namespace(prefix, "risk")
	t.Cleanup(func() { _ = client.CoreV1().Namespaces().Delete(context.Background(), team, metav1.DeleteOptions{}) })
	rep, err := drv.Start(ctx, busapi.ReplicaSpec{ID: "scoring-v1-r1", Team: "risk", Endpoint: "scoring", Model: "scoring", Version: "v1",
		GPUType: busapi.CPUType, Profile: busapi.ProfileCPU, CPUCores: 1, MemoryMB: 512, Runtime: "xgboost",
		Manifest: strings.Repeat("ab", 32), Token: "replica-token"}, agent.StartOptions{})
	must("start a replica", err)
	_, err = drv.Sync(ctx)
	must("resync", err)
	_, err = rep.Observe(ctx)
	must("observe its pod", err)
	// pods/log: the pod is not bound (no node here), so the API server
	// answers an empty log, once the agent may ask at all.
	_, err = drv.ReadLog(busapi.LogRequest{Replica: rep.Spec().ID, Offset: -1, Tail: 10}, busapi.MaxLogChunk)
	must("read its pod's log", err)
	must("stop the replica", rep.Stop(ctx))

	_, err = as.CoreV1().Nodes().Patch(ctx, "any", types.MergePatchType, []byte(`{"metadata":{"labels":{"x":"y"}}}`), metav1.PatchOptions{})
	refused("change a node", err)
	_, err = as.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "escalate-" + ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "mp-agent", Namespace: ns}},
	}, metav1.CreateOptions{})
	refused("bind itself to cluster-admin", err)
	_, err = as.AppsV1().Deployments(team).List(ctx, metav1.ListOptions{})
	refused("read Deployments (it writes pods of its own)", err)
	_, err = as.CoreV1().ConfigMaps("kube-system").List(ctx, metav1.ListOptions{})
	refused("read ConfigMaps", err)
	refused("exec into a pod (it reads logs, never a shell)",
		as.CoreV1().RESTClient().Post().Namespace(team).Resource("pods").Name("any").SubResource("exec").Do(ctx).Error())

	// The server and the gateways have no rights in the API at all.
	for _, sa := range []string{"mp-server", "mp-gateway"} {
		other, err := kubernetes.NewForConfig(c.ServiceAccountConfig(t, ns, sa))
		if err != nil {
			t.Fatal(err)
		}
		_, err = other.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		refused(sa+": list pods", err)
	}

	// A team namespace outlives its endpoints (its quota is the team's);
	// removing a team's namespace is a person's decision, not the agent's.
	refused("delete a team namespace", as.CoreV1().Namespaces().Delete(ctx, team, metav1.DeleteOptions{}))
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

// TestChartMountsThePoolsCertificate: with agent.podTLS.secret the agent
// mounts the Secret whole (no subPath, so renewals arrive) and points
// MP_TLS_CERT, MP_TLS_KEY, MP_TLS_CA and MP_KUBE_SERVER_NAME at it; without
// it, none of them is set.
func TestChartMountsThePoolsCertificate(t *testing.T) {
	t.Parallel()
	agent := func(set ...string) (env map[string]string, mounts, secrets []string) {
		env = map[string]string{}
		for _, o := range decode(t, render(t, "modelplane", set...)) {
			if o.GetKind() != "Deployment" || !strings.HasSuffix(o.GetName(), "-agent") {
				continue
			}
			spec := o.Object["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
			ct := spec["containers"].([]any)[0].(map[string]any)
			for _, e := range ct["env"].([]any) {
				e := e.(map[string]any)
				if v, ok := e["value"].(string); ok {
					env[e["name"].(string)] = v
				}
			}
			for _, m := range ct["volumeMounts"].([]any) {
				m := m.(map[string]any)
				if _, sub := m["subPath"]; sub {
					t.Errorf("mount %v uses subPath", m)
				}
				mounts = append(mounts, m["mountPath"].(string))
			}
			for _, v := range spec["volumes"].([]any) {
				if s, ok := v.(map[string]any)["secret"].(map[string]any); ok {
					secrets = append(secrets, s["secretName"].(string))
				}
			}
		}
		return env, mounts, secrets
	}
	env, mounts, secrets := agent("agent.podTLS.secret=pool-tls", "agent.podTLS.serverName=gpu.replicas.corp")
	for k, want := range map[string]string{"MP_TLS_CERT": "/etc/modelplane/tls/tls.crt", "MP_TLS_KEY": "/etc/modelplane/tls/tls.key",
		"MP_TLS_CA": "/etc/modelplane/tls/ca.crt", "MP_KUBE_SERVER_NAME": "gpu.replicas.corp"} {
		if env[k] != want {
			t.Errorf("%s = %q, want %q", k, env[k], want)
		}
	}
	if !slices.Contains(mounts, "/etc/modelplane/tls") || !slices.Contains(secrets, "pool-tls") {
		t.Errorf("mounts %v, secret volumes %v; want pool-tls at /etc/modelplane/tls", mounts, secrets)
	}
	env, mounts, secrets = agent()
	if _, ok := env["MP_TLS_CERT"]; ok || slices.Contains(mounts, "/etc/modelplane/tls") || len(secrets) != 0 {
		t.Errorf("without podTLS: env %v, mounts %v, secrets %v; want no TLS", env, mounts, secrets)
	}
}
