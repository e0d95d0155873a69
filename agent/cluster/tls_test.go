package cluster_test

import (
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/quartz"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"modelplane/agent"
	"modelplane/agent/cluster"
	"modelplane/busapi"
	"modelplane/internal/kubetest"
	"modelplane/internal/tlstest"
	"modelplane/internal/wait"
)

// mountTLS plays the kubelet for the pod's tls volume: it writes the
// Secret the volume names to a directory of the test and returns where
// path (under cluster.TLSPath) is there.
func mountTLS(t *testing.T, c *kubetest.Cluster, pod *corev1.Pod, path string) string {
	t.Helper()
	var name string
	for _, v := range pod.Spec.Volumes {
		if v.Name == "tls" && v.Secret != nil {
			name = v.Secret.SecretName
		}
	}
	if name == "" {
		t.Fatalf("pod volumes %+v have no tls Secret", pod.Spec.Volumes)
	}
	s, err := c.Client().CoreV1().Secrets(pod.Namespace).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rel, ok := strings.CutPrefix(path, cluster.TLSPath+"/")
	if !ok || s.Data[rel] == nil {
		t.Fatalf("%s is not a key of Secret %s under %s", path, name, cluster.TLSPath)
	}
	f := filepath.Join(t.TempDir(), rel)
	if err := os.WriteFile(f, s.Data[rel], 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestPodsServeThePoolsCertificate: with PodTLS the driver copies the
// pool's certificate into the team namespace's Secret and mounts it in
// the serving container: the guard sidecar of vLLM gets --tls-cert and
// --tls-key under the mount, the built-in runtime MP_TLS_CERT and
// MP_TLS_KEY; every probe is https; a second pass writes nothing. Playing
// the kubelet, the guard runs from its own arguments with the Secret's
// files: a client verifying the pool's server name at the pod IP is
// served, plain HTTP is not, the replica's observation names the server
// name, and the driver reads the runtime's metrics over https by that
// name.
func TestPodsServeThePoolsCertificate(t *testing.T) {
	t.Parallel()
	c := kubetest.Shared(t)
	ca := tlstest.NewCA(t, "pools")
	id := uniq(t)
	serverName := cluster.ServerName("pool-" + id)
	certFile, keyFile := ca.Named(t, serverName).Write(t)
	d, _ := poolWith(t, c, cluster.KindGPU, quartz.NewMock(t), func(cfg *cluster.Config) {
		cfg.PodTLS = &cluster.PodTLS{CertFile: certFile, KeyFile: keyFile, Roots: ca.Pool()}
	}, gpuNode())
	vllm := migSpec("chat-v1-r1", 0)
	vllm.Endpoint, vllm.Model, vllm.Task, vllm.Runtime = "chat", "chat", "llm", "vllm"
	vllm.Profile, vllm.Slots = busapi.ProfileFull, []busapi.Slot{{GPU: 0}}
	builtin := migSpec("fraud-v1-r1", 1)

	r, err := d.Start(t.Context(), vllm, agent.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Start(t.Context(), builtin, agent.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	pod, bpod := podOf(t, c, vllm, d), podOf(t, c, builtin, d)
	wait.Eventually(t, time.Minute, func() bool { n, err := d.Sync(t.Context()); return err == nil && n == 0 },
		"sync of pods with TLS never settled")

	want, err := os.ReadFile(certFile)
	if err != nil {
		t.Fatal(err)
	}
	if got := mountTLS(t, c, pod, cluster.TLSPath+"/tls.crt"); got == "" {
		t.Fatal("no certificate mounted")
	} else if b, _ := os.ReadFile(got); string(b) != string(want) {
		t.Error("the namespace's Secret does not hold the pool's certificate")
	}
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		// serving is the container holding the service port.
		serving string
	}{{"vllm behind the guard", pod, "guard"}, {"builtin", bpod, "runtime"}} {
		var serving, rt corev1.Container
		for _, ct := range tc.pod.Spec.Containers {
			if ct.Name == tc.serving {
				serving = ct
			}
			if ct.Name == "runtime" {
				rt = ct
			}
		}
		mounted := false
		for _, m := range serving.VolumeMounts {
			mounted = mounted || (m.Name == "tls" && m.MountPath == cluster.TLSPath && m.ReadOnly)
		}
		if !mounted {
			t.Errorf("%s: %s mounts %+v, want tls read-only at %s", tc.name, serving.Name, serving.VolumeMounts, cluster.TLSPath)
		}
		if tc.serving == "guard" {
			args := strings.Join(serving.Args, " ")
			if !strings.Contains(args, "--tls-cert "+cluster.TLSPath+"/tls.crt --tls-key "+cluster.TLSPath+"/tls.key") {
				t.Errorf("%s: guard args %q, want the mounted certificate and key", tc.name, args)
			}
			for _, m := range rt.VolumeMounts {
				if m.Name == "tls" {
					t.Errorf("%s: the runtime behind the guard mounts the key", tc.name)
				}
			}
		} else if e, k := env(serving, "MP_TLS_CERT"), env(serving, "MP_TLS_KEY"); e == nil || e.Value != cluster.TLSPath+"/tls.crt" || k == nil || k.Value != cluster.TLSPath+"/tls.key" {
			t.Errorf("%s: runtime env %+v, want MP_TLS_CERT and MP_TLS_KEY under %s", tc.name, serving.Env, cluster.TLSPath)
		}
		for _, p := range []*corev1.Probe{rt.StartupProbe, rt.LivenessProbe, rt.ReadinessProbe} {
			if p == nil || p.HTTPGet == nil || p.HTTPGet.Scheme != corev1.URISchemeHTTPS {
				t.Errorf("%s: probe %+v, want https", tc.name, p)
			}
		}
	}

	// The kubelet's part for vLLM's pod.
	ip := c.NextPodIP()
	var metricsRead atomic.Int64
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(cluster.DefaultInnerPort)))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/metrics" {
			metricsRead.Add(1)
		}
		_, _ = io.WriteString(w, "runtime "+r.URL.Path)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	var g corev1.Container
	for _, ct := range pod.Spec.Containers {
		if ct.Name == "guard" {
			g = ct
		}
	}
	runGuard(t, c, pod, g, ip)

	addr := net.JoinHostPort(ip, strconv.Itoa(cluster.DefaultPort))
	call := func(serverName string) (string, error) {
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool(), ServerName: serverName, MinVersion: tls.VersionTLS12}}
		defer tr.CloseIdleConnections()
		req, _ := http.NewRequest(http.MethodPost, "https://"+addr+"/v1/chat/completions", strings.NewReader("{}"))
		req.Header.Set(busapi.ReplicaTokenHeader, vllm.Token)
		resp, err := (&http.Client{Transport: tr}).Do(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b), nil
	}
	if body, err := call(serverName); err != nil || body != "runtime /v1/chat/completions" {
		t.Errorf("https by the pool's server name = %q, %v; want the runtime's answer", body, err)
	}
	if _, err := call(""); err == nil {
		t.Error("a client verifying the pod IP was served; the certificate names only the pool")
	}
	if code, _ := send(t, http.MethodGet, ip, cluster.DefaultPort, "/health", ""); code != http.StatusBadRequest {
		t.Errorf("plain HTTP to the pod = %d, want 400 from the TLS layer", code)
	}

	c.MarkRunning(t, pod, ip)
	// Its observation names the pool's server name, which the heartbeat
	// carries to the route entry for gateways to verify.
	observed(t, r, "ready by the pool's server name", func(o agent.Observation, err error) bool {
		return err == nil && o.Ready && o.ServerName == serverName
	})
	wait.Eventually(t, time.Minute, func() bool {
		_, _ = r.Observe(t.Context())
		return metricsRead.Load() > 0
	}, "the driver never read the metrics over https")
}
