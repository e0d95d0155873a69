package app

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/quartz"
	"github.com/nats-io/nats.go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"modelplane/agent"
	"modelplane/agent/cluster"
	"modelplane/internal/kubetest"
	"modelplane/internal/natstest"
	"modelplane/internal/tlstest"
)

// TestUploadedXGBoostModelServedFromAPod is the serving test of
// TestUploadedXGBoostModelServedOnACPUNode with a cluster agent: the
// replica is a pod that the real scheduler binds, and the test plays the
// kubelet as the pod says: it runs the init container's `modelplane
// fetch` (which fetches and verifies the version's file from the control
// plane with the pool's credential, read from the Secret the driver made)
// and then the runtime container's command, the built-in runtime, on the
// loopback IP it gave the pod. The gateway's request reaches it there.
func TestUploadedXGBoostModelServedFromAPod(t *testing.T) {
	t.Parallel()
	if r := serveUploadedModel(t, serving{agent: kubeNode(nil)}); r.ServerName != "" {
		t.Errorf("routed %+v: a pod serving plain HTTP names no server name", r)
	}
}

// TestUploadedXGBoostModelServedFromAPodOverTLS is
// TestUploadedXGBoostModelServedFromAPod with the pool's pods serving
// TLS: the kubelet mounts the pool's certificate Secret the driver made,
// the built-in runtime serves it, and the gateway, trusting the issuer,
// calls the pod's IP over https verifying the server name the route entry
// carries from the agent's heartbeat. A pool whose server name is not the
// one its certificate names is refused: the gateway's handshake fails
// (502) at the routed pod.
func TestUploadedXGBoostModelServedFromAPodOverTLS(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, serverName string
		want             string
		refused          bool
	}{
		{"verified by the pool's server name", "", "", false},
		{"refused by a name the certificate does not give", "other.replicas.modelplane.internal", "other.replicas.modelplane.internal", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ca := tlstest.NewCA(t, "pools")
			cert, key := ca.Named(t, cluster.ServerName(kubePool(t))).Write(t)
			if tc.want == "" {
				tc.want = cluster.ServerName(kubePool(t))
			}
			r := serveUploadedModel(t, serving{
				agent:      kubeNode(&cluster.PodTLS{ServerName: tc.serverName, CertFile: cert, KeyFile: key, Roots: ca.Pool()}),
				replicaTLS: &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12},
				refused:    tc.refused,
			})
			if r.ServerName != tc.want {
				t.Errorf("routed %+v, want server name %q", r, tc.want)
			}
		})
	}
}

// kubeNode is a cluster agent of a CPU pool, pod TLS as podTLS says (nil:
// plain HTTP), whose pods the test runs as their kubelet.
func kubeNode(podTLS *cluster.PodTLS) func(*testing.T, servingEnv) *agent.Agent {
	return func(t *testing.T, e servingEnv) *agent.Agent { return startKubeNode(t, e, podTLS) }
}

// kubePool names the pool, and the agent's node, of test t: the test
// cluster is shared, and a pool's driver follows the pool's objects by
// its name.
func kubePool(t *testing.T) string {
	sum := sha256.Sum256([]byte(t.Name()))
	return "serve-" + hex.EncodeToString(sum[:])[:8]
}

func startKubeNode(t *testing.T, e servingEnv, podTLS *cluster.PodTLS) *agent.Agent {
	t.Helper()
	c := kubetest.Shared(t)
	id := kubePool(t)
	n := c.AddNode(t, kubetest.Node{CPU: "8", Memory: "16Gi", Labels: map[string]string{"test.modelplane.io/pool": id}})
	inv, err := cluster.ReadInventory([]corev1.Node{*n}, cluster.KindCPU)
	if err != nil {
		t.Fatal(err)
	}
	drv, err := cluster.New(cluster.Config{Client: c.Client(), Pool: id, Kind: cluster.KindCPU, Inventory: inv,
		NamespacePrefix: id + "-", Image: "modelplane/modelplane:test", ControlPlaneURL: e.api,
		ArtifactToken: func() string { return e.token }, NodeSelector: map[string]string{"test.modelplane.io/pool": id},
		PodTLS: podTLS, Clock: quartz.NewReal(), Log: e.log})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := drv.Watch(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(drv.Close)
	t.Cleanup(func() {
		list, err := c.Client().CoreV1().Namespaces().List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return
		}
		for _, ns := range list.Items {
			if strings.HasPrefix(ns.Name, id+"-") {
				_ = c.Client().CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{})
			}
		}
	})
	c.AutoRun(t, func(p *corev1.Pod) bool { return p.Spec.NodeName == n.Name }, func(p *corev1.Pod) { kubelet(t, c, e.bin, p) })

	anc, err := nats.Connect(e.nats, natstest.Agent(t, id)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(anc.Close)
	a, err := agent.New(agent.Config{Node: id, CPUCores: inv.CPUCores, MemoryMB: inv.MemoryMB, StateDir: t.TempDir(),
		Lease: 15 * time.Second, Heartbeat: time.Second, Driver: drv}, anc, e.log)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Stop)
	return a
}

// kubelet runs pod p's init containers and then its container from the
// modelplane binary, as a kubelet would run the image's entrypoint, with
// the pod's volume as a directory, its Secret references resolved, the
// pool's certificate Secret (the tls volume) as a directory of its files
// and the pod's IP as the runtime's host.
func kubelet(t *testing.T, c *kubetest.Cluster, bin string, p *corev1.Pod) {
	volume, certs := t.TempDir(), t.TempDir()
	for _, v := range p.Spec.Volumes {
		if v.Name != "tls" || v.Secret == nil {
			continue
		}
		s, err := c.Client().CoreV1().Secrets(p.Namespace).Get(context.Background(), v.Secret.SecretName, metav1.GetOptions{})
		if err != nil {
			t.Errorf("pod %s: tls volume: %v", p.Name, err)
			return
		}
		for k, b := range s.Data {
			if err := os.WriteFile(filepath.Join(certs, k), b, 0o600); err != nil {
				t.Error(err)
				return
			}
		}
	}
	env := func(ctr corev1.Container) []string {
		out := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
		for _, e := range ctr.Env {
			v := e.Value
			if ref := e.ValueFrom; ref != nil && ref.SecretKeyRef != nil {
				s, err := c.Client().CoreV1().Secrets(p.Namespace).Get(context.Background(), ref.SecretKeyRef.Name, metav1.GetOptions{})
				if err != nil {
					t.Errorf("pod %s: secret %s: %v", p.Name, ref.SecretKeyRef.Name, err)
					continue
				}
				v = string(s.Data[ref.SecretKeyRef.Key])
			}
			if e.Name == "MP_RUNTIME_HOST" {
				v = p.Status.PodIP
			}
			if rel, ok := strings.CutPrefix(v, cluster.TLSPath+"/"); ok {
				v = filepath.Join(certs, rel)
			}
			out = append(out, e.Name+"="+v)
		}
		return out
	}
	args := func(ctr corev1.Container) []string {
		out := slices.Clone(ctr.Args)
		for i, a := range out {
			if strings.HasPrefix(a, cluster.ModelsPath) {
				out[i] = filepath.Join(volume, strings.TrimPrefix(a, cluster.ModelsPath))
			}
		}
		return out
	}
	for _, ctr := range p.Spec.InitContainers {
		cmd := exec.Command(bin, append(args(ctr), "--egress-allow-loopback")...)
		cmd.Env = env(ctr)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("pod %s: init container %s: %v\n%s", p.Name, ctr.Name, err, out)
			return
		}
	}
	ctr := p.Spec.Containers[0]
	cmd := exec.Command(bin, args(ctr)...)
	cmd.Env = env(ctr)
	// A test binary that dies leaves no runtime on the pod's address.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Errorf("pod %s: %v", p.Name, err)
		return
	}
	go func() { _ = cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
}
