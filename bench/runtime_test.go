package bench

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"syscall"
	"testing"
	"time"

	"modelplane/app"
)

// TestMain makes the test binary the built-in runtime when it is started
// as one (`<test binary> runtime --model-dir D --port P`, the catalogue's
// command with the test binary as {self}), so that the smoke test runs
// real runtime processes without building the modelplane binary.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "runtime" {
		fs := flag.NewFlagSet("runtime", flag.ExitOnError)
		var cfg app.RuntimeConfig
		cfg.Flags(fs)
		_ = fs.Parse(os.Args[2:])
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		if err := app.RunRuntime(ctx, cfg); err != nil {
			fmt.Fprintln(os.Stderr, "runtime:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestParseVmRSS(t *testing.T) {
	t.Parallel()
	status := []byte("Name:\tmodelplane\nVmPeak:\t  900 kB\nVmRSS:\t  123456 kB\nRssAnon:\t 100 kB\n")
	if got, err := parseVmRSS(status); err != nil || got != 123456 {
		t.Errorf("parseVmRSS = %d, %v; want 123456", got, err)
	}
	for _, bad := range []string{"Name:\tx\n", "VmRSS:\t12 MB\n", "VmRSS:\tlots kB\n"} {
		if _, err := parseVmRSS([]byte(bad)); err == nil {
			t.Errorf("parseVmRSS(%q) succeeded", bad)
		}
	}
	// This process's own status has the line the benchmark reads.
	if kb, err := vmRSSKB(os.Getpid()); err != nil || kb <= 0 {
		t.Errorf("vmRSSKB(self) = %d, %v", kb, err)
	}
}

func TestParseInferenceCounts(t *testing.T) {
	t.Parallel()
	text := `# HELP nv_inference_count Number of inferences performed
# TYPE nv_inference_count counter
nv_inference_count{model="m",version="v1"} 640
nv_inference_count_other 5
nv_inference_exec_count{model="m",version="v1"} 20
nv_inference_exec_count{model="m",version="v2"} 12
nv_inference_request_success{model="m",version="v1"} 640
`
	got := parseInferenceCounts([]byte(text))
	if want := [2]float64{640, 32}; got != want {
		t.Errorf("parseInferenceCounts = %v, want %v", got, want)
	}
}

func TestMedianF(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		in   []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{5, 1, 3}, 3}, {[]float64{4, 1, 3, 2}, 2.5}} {
		in := slices.Clone(tt.in)
		if got := medianF(in); got != tt.want {
			t.Errorf("medianF(%v) = %v, want %v", tt.in, got, tt.want)
		}
		if !slices.Equal(in, tt.in) {
			t.Errorf("medianF reordered its argument: %v", in)
		}
	}
}

func TestMLPShapes(t *testing.T) {
	t.Parallel()
	m, err := parseMLP("64x4096x4096")
	if err != nil || m.Inputs != 64 || !slices.Equal(m.Hidden, []int{4096, 4096}) {
		t.Fatalf("parseMLP = %+v, %v", m, err)
	}
	// 64·4096+4096 + 4096·4096+4096 + 4096·1+1
	if got, want := m.weights(), int64(64*4096+4096+4096*4096+4096+4096+1); got != want {
		t.Errorf("weights = %d, want %d", got, want)
	}
	for _, bad := range []string{"", "64", "64x0", "64xa", "-1x3"} {
		if _, err := parseMLP(bad); err == nil {
			t.Errorf("parseMLP(%q) succeeded", bad)
		}
	}
	for _, min := range []int64{1, 200_000_000, 500_000_000} {
		if c := coldShape(min); c.weights()*4 < min {
			t.Errorf("coldShape(%d) = %v holds only %d bytes of weights", min, c, c.weights()*4)
		}
	}
}

// TestRuntimeResultKeys holds the result to the line: these keys,
// at the top level, as numbers.
func TestRuntimeResultKeys(t *testing.T) {
	t.Parallel()
	raw, err := json.Marshal(RuntimeResult{Name: "runtime"})
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	if got["name"] != "runtime" {
		t.Errorf("name = %v", got["name"])
	}
	for _, k := range []string{"rps_batched", "rps_unbatched", "batching_speedup", "p99_ms_batched", "p99_ms_unbatched",
		"cold_start_cached_s", "cold_start_uncached_s", "rss_mb_per_replica"} {
		if _, ok := got[k].(float64); !ok {
			t.Errorf("key %q is %T (%v), want a number", k, got[k], got[k])
		}
	}
}

// TestRuntimeBenchSmoke runs the whole benchmark with tiny settings: a few
// clients, tiny models, a hundred requests per replica. It checks that every
// figure is filled, never how large it is.
func TestRuntimeBenchSmoke(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	set := runtimeSettings{self: self, clients: 4, rounds: 1, phase: 2 * time.Minute, requests: 100,
		mlp: mlpShape{Inputs: 8, Hidden: []int{16}}, cold: mlpShape{Inputs: 8, Hidden: []int{32, 32}}, coldRuns: 1, linkMbps: 8}
	res, err := measureRuntime(context.Background(), set)
	if err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string]float64{
		"rps_batched": res.RPSBatched, "rps_unbatched": res.RPSUnbatched, "batching_speedup": res.BatchingSpeedup,
		"p99_ms_batched": res.P99MsBatched, "p99_ms_unbatched": res.P99MsUnbatched,
		"cold_start_cached_s": res.ColdStartCachedS, "cold_start_uncached_s": res.ColdStartUncachedS,
		"rss_mb_per_replica": res.RSSMBPerReplica,
	} {
		if v <= 0 {
			t.Errorf("%s = %v, want it measured", name, v)
		}
	}
	for _, name := range []string{"onnx", "xgboost", "onnx_demo"} {
		m := res.Models[name]
		if m == nil {
			t.Fatalf("no %s model in %+v", name, res.Models)
		}
		for kind, r := range map[string]*RuntimeRun{"batched": m.Batched, "unbatched": m.Unbatched} {
			if r.Requests != set.requests || r.Errors != 0 || r.RPS <= 0 || r.MeanBatchRows < 1 || r.RSSMBReady <= 0 {
				t.Errorf("%s %s: %+v, want %d requests, no errors, figures filled", name, kind, r, set.requests)
			}
		}
		if m.Unbatched.MeanBatchRows != 1 {
			t.Errorf("%s unbatched executed %v rows per batch, want 1", name, m.Unbatched.MeanBatchRows)
		}
	}
	cs := res.ColdStart
	if cs.Uncached.Fetched != 2 || cs.Cached.Fetched != 0 {
		t.Errorf("files fetched uncached %d, cached %d; want the manifest and the model, then none", cs.Uncached.Fetched, cs.Cached.Fetched)
	}
	if cs.ModelBytes <= 0 || cs.Uncached.DownloadS <= 0 || cs.Cached.DownloadS != 0 || cs.Uncached.StartToReadyS <= 0 {
		t.Errorf("cold start %+v: want a download only uncached and both timed", cs)
	}
	if l := cs.UncachedLink; l == nil || l.Fetched != 2 || l.DownloadS <= 0 || cs.SpeedupLink <= 0 {
		t.Errorf("cold start over the paced link: %+v, speedup %v; want it measured", l, cs.SpeedupLink)
	}
	raw, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	var back RuntimeResult
	if err := json.Unmarshal(raw, &back); err != nil || back.Name != "runtime" || len(back.TargetsMet) == 0 {
		t.Errorf("result does not round-trip as JSON: %v: %s", err, raw)
	}
}
