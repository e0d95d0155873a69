package process

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/quartz"

	"modelplane/agent"
	"modelplane/agent/catalog"
	"modelplane/busapi"
	"modelplane/internal/wait"
)

// standInTriton puts a tritonserver on PATH (so the caller must not run in
// parallel) that checks the generated model repository of model fraud and
// the metrics flags, then runs the fake runtime on the HTTP port it was
// given, with its metrics on the metrics port as Triton serves them, and
// with the fake's flags.
func standInTriton(t *testing.T, flags ...string) {
	t.Helper()
	bin := t.TempDir()
	script := `#!/bin/sh
for a in "$@"; do
  case "$a" in
    --model-repository=*) repo="${a#--model-repository=}" ;;
    --http-port=*) port="${a#--http-port=}" ;;
    --metrics-port=*) mport="${a#--metrics-port=}" ;;
    --metrics-address=*) maddr="${a#--metrics-address=}" ;;
  esac
done
grep -q 'max_batch_size: 8' "$repo/fraud/config.pbtxt" || { echo "no generated config.pbtxt in $repo" >&2; exit 3; }
test -f "$repo/fraud/1/model.onnx" || { echo "version 1 is not the version's files" >&2; exit 3; }
test -n "$mport" || { echo "no --metrics-port" >&2; exit 3; }
test "$maddr" = 127.0.0.1 || { echo "metrics on $maddr, not loopback" >&2; exit 3; }
test "$mport" != "$port" || { echo "metrics on the HTTP port" >&2; exit 3; }
exec ` + fakeBin + ` -port "$port" -model-dir "$repo/fraud/1" -metrics-port "$mport" ` + strings.Join(flags, " ") + `
`
	if err := os.WriteFile(filepath.Join(bin, "tritonserver"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+":"+os.Getenv("PATH"))
}

// tritonDriver is a driver whose only entry is the catalogue's Triton, on
// a version directory holding a model.onnx. Liveness ticks hourly, so the
// test can move the mock clock for the metrics' rates.
func tritonDriver(t *testing.T, state string, clock quartz.Clock, mutate func(*Config)) *Driver {
	t.Helper()
	models := openDir(t)
	if err := os.WriteFile(filepath.Join(models, "model.onnx"), []byte("onnx"), 0o644); err != nil {
		t.Fatal(err)
	}
	return newDriver(t, state, clock, func(c *Config) {
		c.Catalog = map[string]catalog.Entry{catalog.Triton: catalog.Default()[catalog.Triton]}
		c.Resolve = func(context.Context, busapi.ReplicaSpec, string) (Launch, error) {
			return Launch{Runtime: catalog.Triton, ModelDir: models}, nil
		}
		c.LiveInterval = time.Hour
		if mutate != nil {
			mutate(c)
		}
	})
}

func tritonSpec(id string) busapi.ReplicaSpec {
	s := spec(id)
	s.Settings = []byte(`{"batching":{"max_batch_size":8,"preferred_batch_sizes":[4,8],"max_queue_delay_us":2000}}`)
	return s
}

// Triton runs on a model repository the driver writes into the replica's
// directory: the generated config.pbtxt beside a link of version 1 to the
// version's files. A stand-in tritonserver checks the layout and then runs
// the fake runtime on the port it was given.
func TestTritonGetsAGeneratedModelRepository(t *testing.T) {
	standInTriton(t)
	state := t.TempDir()
	d := tritonDriver(t, state, quartz.NewMock(t), nil)
	r := start(t, d, tritonSpec("r-triton"), "")
	waitReady(t, r)
	cfg, err := os.ReadFile(filepath.Join(state, "r-triton.d", "repository", "fraud", "config.pbtxt"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`platform: "onnxruntime_onnx"`, "preferred_batch_size: [ 4, 8 ]", "max_queue_delay_microseconds: 2000", "kind: KIND_GPU", "gpus: [ 0 ]"} {
		if !strings.Contains(string(cfg), want) {
			t.Errorf("config.pbtxt lacks %q:\n%s", want, cfg)
		}
	}
}

// TestTritonHeartbeatReadsItsMetricsPort: a Triton replica gets a second
// port for its metrics, on loopback, and the agent's heartbeat carries what
// Triton says there: queue and in flight while requests wait, then the
// requests answered, the mean batch, the batcher's queue time and GPU use,
// with the fields Triton does not export (KV, tokens, TTFT) named absent.
// Through the token guard the gateway's port does not serve the metrics.
func TestTritonHeartbeatReadsItsMetricsPort(t *testing.T) {
	hold := filepath.Join(openDir(t), "release")
	standInTriton(t, "-hold-file", hold)
	nc, kv := agentEnv(t)
	clock := quartz.NewMock(t)
	state := t.TempDir()
	d := tritonDriver(t, state, clock, nil)
	a := startAgent(t, nc, "gpu-7", t.TempDir(), d)
	s := tritonSpec("r-triton-m")
	s.Token = "replica-token-7"
	putDesired(t, kv, "gpu-7", 1, s)
	wait.Eventually(t, long, func() bool { return replicaStatus(a, s.ID).State == busapi.StateReady },
		"replica never ready: %v", wait.Show(func() any { return a.Status().Replicas }))

	rs := replicaStatus(a, s.ID)
	if rs.Runtime != catalog.Triton {
		t.Errorf("heartbeat runtime = %q, want %q", rs.Runtime, catalog.Triton)
	}
	data, err := os.ReadFile(filepath.Join(state, s.ID+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var rec record
	if err := json.Unmarshal(data, &rec); err != nil {
		t.Fatal(err)
	}
	if rec.MetricsPort == 0 || rec.MetricsPort == rec.Port || rec.MetricsPort == rec.InnerPort {
		t.Fatalf("record = %+v, want a metrics port of its own", rec)
	}
	if !strings.Contains(readLog(t, d, s.ID), "--metrics-port="+strconv.Itoa(rec.MetricsPort)) {
		t.Errorf("log lacks the metrics port on the command line:\n%s", readLog(t, d, s.ID))
	}
	// The gateway's address does not serve Triton's metrics without the
	// replica's token (they are not among the guard's open probes), nor
	// with it (Triton's HTTP port has none).
	for _, token := range []string{"", s.Token} {
		if code, _ := call(t, http.MethodGet, rs.Addr, "/metrics", token); code == http.StatusOK {
			t.Errorf("GET /metrics on the replica's address (token %q) = %d, want no metrics there", token, code)
		}
	}
	if code, _ := call(t, http.MethodGet, rs.Addr, "/metrics", ""); code != http.StatusUnauthorized {
		t.Errorf("GET /metrics without the token = %d, want 401 from the guard", code)
	}

	const n = 2
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() { _, _ = predictWith(rs.Addr, s.Token) })
	}
	wait.Eventually(t, long, func() bool { rs := replicaStatus(a, s.ID); return rs.QueueDepth == n && rs.InFlight == n },
		"heartbeat never showed %d queued and in flight: %v", n, wait.Show(func() any { return replicaStatus(a, s.ID) }))
	if err := os.WriteFile(hold, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	wait.Eventually(t, long, func() bool { rs := replicaStatus(a, s.ID); return rs.Requests == n && rs.InFlight == 0 },
		"heartbeat never showed the requests answered: %v", wait.Show(func() any { return replicaStatus(a, s.ID) }))
	// The queue time is over the seconds between readings: move the
	// driver's clock past one.
	clock.Advance(2 * time.Second).MustWait(t.Context())
	wait.Eventually(t, long, func() bool { return replicaStatus(a, s.ID).BatchQueueMS == 5 },
		"heartbeat never showed 5 ms of queue time: %v", wait.Show(func() any { return replicaStatus(a, s.ID) }))
	rs = replicaStatus(a, s.ID)
	if rs.BatchSize != 2 || rs.GPUUtil != 0.25 || rs.QueueDepth != 0 {
		t.Errorf("heartbeat = %+v, want batch 2, GPU use 0.25, nothing queued", rs)
	}
	want := []string{busapi.MetricKVUsedPct, busapi.MetricTokensPerSecond, busapi.MetricTokens, busapi.MetricTTFTMS, busapi.MetricPromptTokens}
	if !slices.Equal(rs.Absent, want) {
		t.Errorf("absent = %q, want %q: what Triton exports is there, what it does not is absent", rs.Absent, want)
	}
}

// TestTritonMetricsPortComesFromTheRangeAndIsFreed: with the node's port
// range, a Triton replica's two ports both come from it, and both are free
// again once the replica stopped.
func TestTritonMetricsPortComesFromTheRangeAndIsFreed(t *testing.T) {
	standInTriton(t)
	first := freeRange(t, 3)
	d := tritonDriver(t, t.TempDir(), quartz.NewMock(t), func(c *Config) { c.PortFirst, c.PortLast = first, first+2 })
	r := start(t, d, tritonSpec("r-triton-a"), "")
	waitReady(t, r)
	r.mu.Lock()
	port, mport := r.port, r.metricsPort
	r.mu.Unlock()
	if port < first || port > first+2 || mport < first || mport > first+2 || port == mport {
		t.Fatalf("ports %d and %d, want two in %d-%d", port, mport, first, first+2)
	}
	if o := observe(t, r); o.Requests != 0 || slices.Contains(o.Absent, busapi.MetricRequests) {
		t.Errorf("observation %+v: want the metrics read from port %d", o, mport)
	}
	// Two ports are taken of three: a second Triton replica does not fit.
	if _, err := d.Start(t.Context(), tritonSpec("r-triton-b"), agent.StartOptions{}); err == nil || !strings.Contains(err.Error(), "no free port") {
		t.Fatalf("a second Triton replica in a range of three: %v, want no free port", err)
	}
	stopAll(t, d)
	d.mu.Lock()
	left := len(d.ports)
	d.mu.Unlock()
	if left != 0 {
		t.Errorf("%d ports still taken after the replica stopped", left)
	}
	r2 := start(t, d, tritonSpec("r-triton-b"), "")
	waitReady(t, r2)
}

// freeRange is the first of n consecutive ports free on 127.0.0.1 now.
func freeRange(t *testing.T, n int) int {
	t.Helper()
	for p := 34000; p < 35000; p += n {
		var ls []net.Listener
		for i := range n {
			l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p+i))
			if err != nil {
				break
			}
			ls = append(ls, l)
		}
		for _, l := range ls {
			l.Close()
		}
		if len(ls) == n {
			return p
		}
	}
	t.Skipf("no %d free consecutive ports", n)
	return 0
}
