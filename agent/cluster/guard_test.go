package cluster_test

import (
	"context"
	"flag"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/quartz"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"modelplane/agent"
	"modelplane/agent/cluster"
	"modelplane/app"
	"modelplane/busapi"
	"modelplane/internal/kubetest"
	"modelplane/internal/wait"
)

// TestGuardSidecarFrontsRuntimesThatDoNotCheckTheToken: the pod of a
// runtime that does not check the replica token (vLLM, Triton) runs the
// runtime on the pod's loopback and `modelplane guard` from modelplane's
// image on the service port, with the token from the replica's Secret;
// the runtime's probes go through the guard's port on paths it opens.
// The test then plays the kubelet as the pod says (the pod's loopback is
// its pod IP here, as all pods share the test's): a real HTTP server
// stands for the runtime on the inner port, the guard subcommand runs
// from the container's own arguments, every probe passes without a
// token, a request without it or with a wrong one is refused, with it the
// runtime answers, and the agent reads Triton's metrics, kept on their
// own port, through the guard.
func TestGuardSidecarFrontsRuntimesThatDoNotCheckTheToken(t *testing.T) {
	t.Parallel()
	c := kubetest.Shared(t)
	clock := quartz.NewMock(t)
	d, _ := poolWithClock(t, c, cluster.KindGPU, clock, gpuNode())
	vllm := migSpec("chat-v1-r1", 0)
	vllm.Endpoint, vllm.Model, vllm.Task, vllm.Runtime = "chat", "chat", "llm", "vllm"
	vllm.Profile, vllm.Slots = busapi.ProfileFull, []busapi.Slot{{GPU: 0}}
	triton := migSpec("fraud-v1-r1", 0)
	triton.Runtime = "onnxruntime" // on a GPU: Triton
	triton.Profile, triton.Slots = busapi.ProfileFull, []busapi.Slot{{GPU: 1}}
	tritonMetrics, err := os.ReadFile("../catalog/testdata/triton-25.metrics.txt")
	if err != nil {
		t.Fatal(err)
	}
	vllmMetrics, err := os.ReadFile("../catalog/testdata/vllm-0.11.metrics.txt")
	if err != nil {
		t.Fatal(err)
	}
	// vLLM's counters as the runtime serves them: reading 1 is the file's,
	// reading 2 a thousand tokens and ten first tokens (one second of
	// waiting in all) later.
	var reading atomic.Int64
	reading.Store(1)
	vllmAt := func() []byte {
		if reading.Load() == 1 {
			return vllmMetrics
		}
		r := strings.NewReplacer(`model_name="chat"} 51200.0`, `model_name="chat"} 52200.0`,
			`time_to_first_token_seconds_count{engine="0",model_name="chat"} 200.0`, `time_to_first_token_seconds_count{engine="0",model_name="chat"} 210.0`,
			`time_to_first_token_seconds_sum{engine="0",model_name="chat"} 24.0`, `time_to_first_token_seconds_sum{engine="0",model_name="chat"} 25.0`)
		return []byte(r.Replace(string(vllmMetrics)))
	}

	for _, tc := range []struct {
		spec    busapi.ReplicaSpec
		call    string // a path only the gateway may call
		open    []string
		metrics bool // Triton's metrics on their own port
	}{
		{vllm, "/v1/chat/completions", []string{"/health", "/v1/models", "/metrics"}, false},
		{triton, "/v2/models/fraud/infer", []string{"/v2/health/live", "/v2/models/fraud/ready"}, true},
	} {
		t.Run(tc.spec.Runtime, func(t *testing.T) {
			r, err := d.Start(t.Context(), tc.spec, agent.StartOptions{})
			if err != nil {
				t.Fatal(err)
			}
			pod := podOf(t, c, tc.spec, d)
			if len(pod.Spec.Containers) != 2 || pod.Spec.Containers[0].Name != "runtime" || pod.Spec.Containers[1].Name != "guard" {
				t.Fatalf("containers = %v, want the runtime and the guard", names(pod.Spec.Containers))
			}
			rt, g := pod.Spec.Containers[0], pod.Spec.Containers[1]
			inner := "127.0.0.1:" + strconv.Itoa(cluster.DefaultInnerPort)
			line := strings.Join(append(slices.Clone(rt.Command), rt.Args...), " ")
			if !strings.Contains(line, "127.0.0.1") || !strings.Contains(line, strconv.Itoa(cluster.DefaultInnerPort)) || strings.Contains(line, "0.0.0.0") {
				t.Errorf("runtime command line %q, want it on %s only", line, inner)
			}
			if len(rt.Ports) != 0 {
				t.Errorf("runtime ports = %+v, want none: the guard holds the service port", rt.Ports)
			}
			if env(rt, "MP_REPLICA_TOKEN") != nil {
				t.Error("the runtime container gets the replica token; want it only in the guard")
			}
			if g.Image != "modelplane/modelplane:test" || len(g.Args) == 0 || g.Args[0] != "guard" {
				t.Errorf("guard container = %s %q, want modelplane's image running the guard", g.Image, g.Args)
			}
			if e := env(g, "MP_REPLICA_TOKEN"); e == nil || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef.Name != pod.Name {
				t.Errorf("guard env = %+v, want the token from the replica's Secret", g.Env)
			}
			if len(g.Ports) != 1 || g.Ports[0].ContainerPort != cluster.DefaultPort || g.Ports[0].Name != "http" {
				t.Errorf("guard ports = %+v, want http on %d", g.Ports, cluster.DefaultPort)
			}
			if tc.metrics != strings.Contains(line, "--metrics-address=127.0.0.1 --metrics-port="+strconv.Itoa(cluster.TritonMetricsPort)) {
				t.Errorf("runtime command line %q: metrics on loopback port %d = %t, want %t", line, cluster.TritonMetricsPort, !tc.metrics, tc.metrics)
			}

			// A second pass over the pod with its guard writes nothing.
			wait.Eventually(t, time.Minute, func() bool { n, err := d.Sync(t.Context()); return err == nil && n == 0 },
				"sync of a guarded pod never settled")

			// The kubelet's part: the runtime on the pod's loopback (its IP
			// here), the guard from its container's arguments and env.
			ip := c.NextPodIP()
			runtimeAt := func(port int, h http.HandlerFunc) {
				ln, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(port)))
				if err != nil {
					t.Fatal(err)
				}
				srv := &http.Server{Handler: h}
				go func() { _ = srv.Serve(ln) }()
				t.Cleanup(func() { _ = srv.Close() })
			}
			var reached atomic.Int64
			runtimeAt(cluster.DefaultInnerPort, func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == tc.call {
					reached.Add(1)
				}
				if r.URL.Path == "/metrics" && !tc.metrics {
					_, _ = w.Write(vllmAt())
					return
				}
				_, _ = io.WriteString(w, "runtime "+r.URL.Path)
			})
			if tc.metrics {
				runtimeAt(cluster.TritonMetricsPort, func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(tritonMetrics) })
			}
			runGuard(t, c, pod, g, ip)

			for _, p := range []*corev1.Probe{rt.StartupProbe, rt.LivenessProbe, rt.ReadinessProbe} {
				if p == nil || p.HTTPGet == nil {
					t.Fatalf("probes = %+v / %+v / %+v, want all three over HTTP", rt.StartupProbe, rt.LivenessProbe, rt.ReadinessProbe)
				}
				if p.HTTPGet.Port.IntValue() != cluster.DefaultPort || !slices.Contains(tc.open, p.HTTPGet.Path) {
					t.Errorf("probe %s on port %s, want the guard's %d and one of %v", p.HTTPGet.Path, p.HTTPGet.Port.String(), cluster.DefaultPort, tc.open)
				}
				if code, body := send(t, http.MethodGet, ip, p.HTTPGet.Port.IntValue(), p.HTTPGet.Path, ""); code != http.StatusOK || body != "runtime "+p.HTTPGet.Path {
					t.Errorf("probe %s as the kubelet sends it = %d %q, want the runtime's answer", p.HTTPGet.Path, code, body)
				}
			}
			for _, tok := range []string{"", "token-of-another-replica"} {
				if code, _ := send(t, http.MethodPost, ip, cluster.DefaultPort, tc.call, tok); code != http.StatusUnauthorized {
					t.Errorf("%s with token %q = %d, want 401", tc.call, tok, code)
				}
			}
			if n := reached.Load(); n != 0 {
				t.Errorf("the runtime saw %d refused requests", n)
			}
			if code, body := send(t, http.MethodPost, ip, cluster.DefaultPort, tc.call, tc.spec.Token); code != http.StatusOK || body != "runtime "+tc.call {
				t.Errorf("%s with the replica's token = %d %q, want the runtime's answer", tc.call, code, body)
			}

			c.MarkRunning(t, pod, ip)
			o := observed(t, r, "ready", func(o agent.Observation, err error) bool { return err == nil && o.Ready })
			if r.Addr() != net.JoinHostPort(ip, strconv.Itoa(cluster.DefaultPort)) {
				t.Errorf("addr = %q, want the guard's port on the pod IP", r.Addr())
			}
			if tc.metrics && (o.QueueDepth != 4 || o.BatchSize != 16 || o.GPUUtil != 0.6 || o.BatchQueueMS != 2.5 ||
				slices.Contains(o.Absent, busapi.MetricBatchQueueMS)) {
				t.Errorf("observation = %+v, want Triton's metrics read through the guard (queue 4, batch 16, GPU 0.6, batch queue 2.5 ms)", o)
			}
			if !tc.metrics {
				// The rates from two readings two seconds apart.
				reading.Store(2)
				clock.Advance(2 * time.Second)
				o, err = r.Observe(t.Context())
				if err != nil || o.TokensPerSecond != 500 || o.TTFTMS != 100 || slices.Contains(o.Absent, busapi.MetricTokensPerSecond) {
					t.Errorf("second reading = %+v, %v; want 500 tokens/s and a 100 ms TTFT", o, err)
				}
			}
		})
	}
}

// runGuard runs the guard container's command, `modelplane guard` with
// its own arguments, as the kubelet would: its Secret resolved into
// MP_REPLICA_TOKEN and the pod's loopback being ip.
func runGuard(t *testing.T, c *kubetest.Cluster, pod *corev1.Pod, g corev1.Container, ip string) {
	t.Helper()
	var cfg app.GuardConfig
	fs := flag.NewFlagSet("guard", flag.ContinueOnError)
	cfg.Flags(fs)
	if err := fs.Parse(g.Args[1:]); err != nil {
		t.Fatalf("guard args %q: %v", g.Args, err)
	}
	ref := env(g, "MP_REPLICA_TOKEN").ValueFrom.SecretKeyRef
	s, err := c.Client().CoreV1().Secrets(pod.Namespace).Get(t.Context(), ref.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Token = app.Secret(s.Data[ref.Key])
	if cfg.TLS.Cert != "" {
		// The kubelet's part of the tls volume: the Secret's files.
		cfg.TLS.Cert, cfg.TLS.Key = mountTLS(t, c, pod, cfg.TLS.Cert), mountTLS(t, c, pod, cfg.TLS.Key)
	}
	onPod := func(addr string) string {
		host, port, _ := net.SplitHostPort(addr)
		if host == "" || host == "127.0.0.1" {
			host = ip
		}
		return net.JoinHostPort(host, port)
	}
	cfg.Listen = onPod(cfg.Listen)
	if cfg.Upstream = onPod(cfg.Upstream); cfg.MetricsUpstream != "" {
		cfg.MetricsUpstream = onPod(cfg.MetricsUpstream)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- app.RunGuard(ctx, cfg) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("guard: %v", err)
		}
	})
	wait.Eventually(t, time.Minute, func() bool {
		conn, err := net.Dial("tcp", cfg.Listen)
		if err == nil {
			conn.Close()
		}
		return err == nil
	}, "the guard never listened on %s", cfg.Listen)
}

// send calls ip:port path with the replica token (none when "").
func send(t *testing.T, method, ip string, port int, path, token string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, "http://"+net.JoinHostPort(ip, strconv.Itoa(port))+path, strings.NewReader("{}"))
	if token != "" {
		req.Header.Set(busapi.ReplicaTokenHeader, token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func names(cs []corev1.Container) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Name)
	}
	return out
}

func env(c corev1.Container, name string) *corev1.EnvVar {
	for i := range c.Env {
		if c.Env[i].Name == name {
			return &c.Env[i]
		}
	}
	return nil
}

// TestGuardTakesItsShareOfTheReplicasCores: a CPU pool's llama-server
// pod asks for exactly the cores and memory modelplane placed (what a
// namespace quota and the pool's inventory count), the guard's share
// taken out of the runtime's.
func TestGuardTakesItsShareOfTheReplicasCores(t *testing.T) {
	t.Parallel()
	c := kubetest.Shared(t)
	d, _ := pool(t, c, cluster.KindCPU, kubetest.Node{CPU: "8", Memory: "16Gi"})
	spec := cpuSpec("chat-v1-r1", 2, 1024)
	spec.Runtime = "llamacpp"
	if _, err := d.Start(t.Context(), spec, agent.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := podOf(t, c, spec, d)
	if len(pod.Spec.Containers) != 2 {
		t.Fatalf("containers = %v, want the runtime and the guard", names(pod.Spec.Containers))
	}
	wait.Eventually(t, time.Minute, func() bool { n, err := d.Sync(t.Context()); return err == nil && n == 0 },
		"sync of a guarded pod with its share never settled")
	rt, g := pod.Spec.Containers[0].Resources, pod.Spec.Containers[1].Resources
	for _, tc := range []struct {
		res            corev1.ResourceName
		runtime, guard string
		total          string
	}{
		{corev1.ResourceCPU, "1900m", "100m", "2"},
		{corev1.ResourceMemory, "960Mi", "64Mi", "1Gi"},
	} {
		r, gq := rt.Requests[tc.res], g.Requests[tc.res]
		if r.String() != tc.runtime || gq.String() != tc.guard {
			t.Errorf("%s: runtime %s, guard %s; want %s and %s", tc.res, r.String(), gq.String(), tc.runtime, tc.guard)
		}
		if rl, gl := rt.Limits[tc.res], g.Limits[tc.res]; rl.Cmp(r) != 0 || gl.Cmp(gq) != 0 {
			t.Errorf("%s: limits %s and %s, want the requests", tc.res, rl.String(), gl.String())
		}
		sum := r.DeepCopy()
		sum.Add(gq)
		if want := resource.MustParse(tc.total); sum.Cmp(want) != 0 {
			t.Errorf("%s: pod asks for %s, want the replica's %s", tc.res, sum.String(), tc.total)
		}
	}
}
