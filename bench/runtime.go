package bench

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"modelplane/agent/cache"
	"modelplane/agent/catalog"
	"modelplane/artifact"
	"modelplane/busapi"
	"modelplane/egress"
	"modelplane/internal/freeport"
	"modelplane/serveapi"
)

// RuntimeResult is what `modelplane bench runtime` prints: the built-in
// runtime's throughput and latency with and without dynamic batching, its
// cold start from the node cache with and without the files cached, and its
// memory (DESIGN.md section 16, issue 14's speed section).
//
// The headline throughput, latency and RSS figures are those of the ONNX MLP
// (Models["onnx"]), the model dynamic batching is for. Models["xgboost"]
// and Models["onnx_demo"] hold the same figures for the demo fraud model's
// v23 (XGBoost trees, whose walk costs the same per row in a batch or
// alone) and v24 (an ONNX logistic regression over 6 features, far too
// small for batching to save anything but calls).
type RuntimeResult struct {
	Name            string  `json:"name"`
	RPSBatched      float64 `json:"rps_batched"`
	RPSUnbatched    float64 `json:"rps_unbatched"`
	BatchingSpeedup float64 `json:"batching_speedup"`
	P99MsBatched    float64 `json:"p99_ms_batched"`
	P99MsUnbatched  float64 `json:"p99_ms_unbatched"`
	// The cold starts are medians over ColdStart.Runs, of the model of
	// ColdStart.ModelBytes; the uncached one is over the paced link
	// (ColdStart.UncachedLink) unless --link-mbps is 0.
	ColdStartCachedS   float64 `json:"cold_start_cached_s"`
	ColdStartUncachedS float64 `json:"cold_start_uncached_s"`
	// RSSMBPerReplica is the VmRSS of the ONNX MLP's batched replica right
	// after its warm-up.
	RSSMBPerReplica float64 `json:"rss_mb_per_replica"`
	// HeadlineModel names the Models entry the figures above come from.
	HeadlineModel string                   `json:"headline_model"`
	Models        map[string]*RuntimeModel `json:"models"`
	ColdStart     *ColdStart               `json:"cold_start"`
	// Clients is the closed-loop clients of every load phase; Rounds how
	// many phases each replica got, alternating batched and unbatched, and
	// PhaseSeconds the measured length of one.
	Clients      int     `json:"clients"`
	Rounds       int     `json:"rounds"`
	PhaseSeconds float64 `json:"phase_seconds"`
	// Pinned says whether every runtime ran on RuntimeCPU alone and the
	// clients (this process) on ClientCPUs, by taskset.
	Cores      int    `json:"cores"`
	Pinned     bool   `json:"pinned"`
	RuntimeCPU string `json:"runtime_cpu,omitempty"`
	ClientCPUs string `json:"client_cpus,omitempty"`
	// LoadAvg is /proc/loadavg before and after: the machine may be shared.
	LoadAvgBefore string          `json:"loadavg_before"`
	LoadAvgAfter  string          `json:"loadavg_after"`
	Seconds       float64         `json:"seconds"`
	TargetsMet    map[string]bool `json:"targets_met"`
}

// RuntimeModel is one model's load test: the same model served by two
// replicas, one batching and one not.
type RuntimeModel struct {
	Format string `json:"format"`
	// Model says what the model is, in words with its sizes.
	Model     string `json:"model"`
	FileBytes int64  `json:"file_bytes"`
	Features  int    `json:"features"`
	// BatchingSpeedup is Batched.RPS over Unbatched.RPS.
	BatchingSpeedup float64     `json:"batching_speedup"`
	Batched         *RuntimeRun `json:"batched"`
	Unbatched       *RuntimeRun `json:"unbatched"`
	// TargetMet: a speedup of 3 or more at a p99 no worse than unbatched.
	TargetMet bool `json:"target_met"`
}

// RuntimeRun is one replica's figures over all its load phases.
type RuntimeRun struct {
	Batching serveapi.Batching `json:"batching"`
	RPS      float64           `json:"rps"`
	P50Ms    float64           `json:"p50_ms"`
	P99Ms    float64           `json:"p99_ms"`
	Requests int               `json:"requests"`
	Errors   int               `json:"errors"`
	// MeanBatchRows is rows per model execution during the phases, from
	// the runtime's nv_inference_count and nv_inference_exec_count.
	MeanBatchRows float64 `json:"mean_batch_rows"`
	// RSSMBReady is VmRSS once the replica reported ready (warmed up);
	// RSSMBAfter after the last phase.
	RSSMBReady float64 `json:"rss_mb_ready"`
	RSSMBAfter float64 `json:"rss_mb_after"`

	lat  []time.Duration
	secs float64
}

// ColdStart is the cold start of one replica of a large ONNX MLP through
// the agent's path: the node cache (package agent/cache) fetches the
// version's manifest and file from an artifact endpoint, verifies and links
// them, then the runtime process loads the model and warms up; the time
// ends when /v2/health/ready answers 200.
type ColdStart struct {
	Model      string  `json:"model"`
	ModelBytes int64   `json:"model_bytes"`
	ModelMB    float64 `json:"model_mb"`
	Runs       int     `json:"runs"`
	// Uncached starts from an empty cache directory (download, verify,
	// link, load, warm-up); Cached from the directory the uncached run
	// left, opened by a new Cache as after an agent restart (the cache's
	// verify-on-open policy, then load and warm-up).
	Uncached ColdPhase `json:"uncached"`
	Cached   ColdPhase `json:"cached"`
	// Speedup is Uncached.TotalS over Cached.TotalS.
	Speedup float64 `json:"speedup"`
	// Over loopback the download costs little; UncachedLink is the
	// uncached start with the artifact endpoint sending at LinkMbps
	// (megabits per second), as a node fetching over a network would, and
	// SpeedupLink its total over Cached.TotalS. Absent with --link-mbps 0.
	LinkMbps     int        `json:"link_mbps,omitempty"`
	UncachedLink *ColdPhase `json:"uncached_link,omitempty"`
	SpeedupLink  float64    `json:"speedup_link,omitempty"`
	// ServedBy says what answered GET /internal/artifacts/{sha256}.
	ServedBy string `json:"served_by"`
}

// ColdPhase is the medians of one kind of cold start, split as the
// replica's page shows it.
type ColdPhase struct {
	TotalS float64 `json:"total_s"`
	// PrepareS is the cache's whole preparation, of which DownloadS and
	// VerifyS are the parts it reports.
	PrepareS  float64 `json:"prepare_s"`
	DownloadS float64 `json:"download_s"`
	VerifyS   float64 `json:"verify_s"`
	// StartToReadyS is from the runtime's start to ready; LoadS and
	// WarmupS are the parts the runtime logs.
	StartToReadyS float64   `json:"start_to_ready_s"`
	LoadS         float64   `json:"load_s"`
	WarmupS       float64   `json:"warmup_s"`
	RSSMB         float64   `json:"rss_mb"`
	Fetched       int       `json:"files_fetched"`
	TotalsS       []float64 `json:"totals_s"`
}

// Defaults of `modelplane bench runtime`.
const (
	defaultRuntimeClients = 64
	defaultRuntimeTime    = 16 * time.Second
	defaultColdMB         = 200
	defaultColdRuns       = 3
	// defaultLinkMbps is the paced uncached start's link: 1 Gbit/s, a
	// node's ordinary network port.
	defaultLinkMbps = 1000
	// defaultMLP is the throughput ONNX model: 64 inputs, two hidden
	// layers of 4096 (17 million weights, a 68 MB file), one sigmoid
	// output. At this size one row's pass streams every weight from
	// memory while a batch reuses each weight for all its rows, so the
	// model's time per row falls several times with the batch, more than
	// the HTTP and JSON work per request that batching does not save; with
	// 2048-wide layers (17 MB) a loaded machine showed about 2.4x, below
	// the target.
	defaultMLP      = "64x4096x4096"
	runtimeRounds   = 4
	runtimeWarmup   = time.Second
	runtimeBodies   = 256
	runtimeToken    = "bench-agent-token"
	readyTimeout    = 2 * time.Minute
	readyPoll       = 2 * time.Millisecond
	runtimeCoreName = "0"
)

// batchedSettings is the batched replica's batcher: up to 64 rows, a
// window of at most 2 ms, and 16, 32 and 64 executed at once.
var batchedSettings = serveapi.Batching{MaxBatchSize: 64, MaxQueueDelayUS: 2000, PreferredBatchSizes: []int{16, 32, 64}}

// unbatchedSettings executes every request alone.
var unbatchedSettings = serveapi.Batching{MaxBatchSize: 1}

// runtimeSettings are one run's sizes; the command's come from Config,
// the smoke test makes tiny ones.
type runtimeSettings struct {
	// self is the modelplane program the catalogue's command runs.
	self     string
	clients  int
	rounds   int
	warmup   time.Duration
	phase    time.Duration
	requests int // > 0: a phase also ends after this many measured requests
	mlp      mlpShape
	cold     mlpShape
	coldRuns int
	linkMbps int
	pin      bool
}

func runRuntimeBench(ctx context.Context, cfg Config, out io.Writer) error {
	set, err := cfg.runtimeSettings()
	if err != nil {
		return err
	}
	res, err := measureRuntime(ctx, set)
	if err != nil {
		return err
	}
	return emit(out, cfg.JSON, res, "runtime: %s %.0f req/s batched, %.0f unbatched (%.2fx), p99 %.1f / %.1f ms; cold start %.2f s cached, %.2f s uncached (%.0f MB); %.0f MB RSS\n",
		res.HeadlineModel, res.RPSBatched, res.RPSUnbatched, res.BatchingSpeedup, res.P99MsBatched, res.P99MsUnbatched,
		res.ColdStartCachedS, res.ColdStartUncachedS, res.ColdStart.ModelMB, res.RSSMBPerReplica)
}

// runtimeSettings turns the flags into the run's sizes.
func (c Config) runtimeSettings() (runtimeSettings, error) {
	self, err := os.Executable()
	if err != nil {
		return runtimeSettings{}, err
	}
	mlp, err := parseMLP(cmpOr(c.MLP, defaultMLP))
	if err != nil {
		return runtimeSettings{}, fmt.Errorf("--mlp: %w", err)
	}
	clients := cmpOr(c.RuntimeClients, defaultRuntimeClients)
	total := cmpOr(c.RuntimeTime, defaultRuntimeTime)
	return runtimeSettings{self: self, clients: clients, rounds: runtimeRounds, warmup: runtimeWarmup,
		phase: total / runtimeRounds, mlp: mlp, cold: coldShape(int64(cmpOr(c.ColdMB, defaultColdMB)) * 1_000_000),
		coldRuns: cmpOr(c.ColdRuns, defaultColdRuns), linkMbps: max(c.LinkMbps, 0), pin: true}, nil
}

func cmpOr[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// runtimeBench is one run: its scratch directory and what it measured.
type runtimeBench struct {
	set    runtimeSettings
	s      *scratch
	client *http.Client
	res    RuntimeResult
}

// measureRuntime writes the models, load-tests each with a batched and an
// unbatched replica, then measures the cold starts.
func measureRuntime(ctx context.Context, set runtimeSettings) (RuntimeResult, error) {
	began := time.Now()
	b := &runtimeBench{set: set, res: RuntimeResult{Name: "runtime", HeadlineModel: "onnx", Models: map[string]*RuntimeModel{},
		Clients: set.clients, Rounds: set.rounds, PhaseSeconds: set.phase.Seconds(), Cores: runtime.NumCPU(), LoadAvgBefore: loadAvg()}}
	s, err := newScratch("mp-bench-runtime-")
	if err != nil {
		return b.res, err
	}
	defer s.close()
	b.s = s
	if set.pin && pinSelf() {
		b.res.Pinned, b.res.RuntimeCPU, b.res.ClientCPUs = true, runtimeCoreName, fmt.Sprintf("1-%d", runtime.NumCPU()-1)
	}
	b.client = loadClient(s, 4096, 1024)
	type subject struct {
		name, dir string
		rm        *RuntimeModel
		bodies    []string
	}
	var subjects []subject
	dir, rm, err := b.writeONNX("onnx", set.mlp)
	if err != nil {
		return b.res, err
	}
	subjects = append(subjects, subject{"onnx", dir, rm, nil})
	for _, d := range []struct{ name, version string }{{"xgboost", "v23"}, {"onnx_demo", "v24"}} {
		dir, rm, err := b.writeDemo(d.name, d.version)
		if err != nil {
			return b.res, err
		}
		subjects = append(subjects, subject{d.name, dir, rm, demoBodies(runtimeBodies)})
	}
	for _, m := range subjects {
		if err := b.loadTest(ctx, m.dir, m.rm, m.bodies); err != nil {
			return b.res, fmt.Errorf("%s: %w", m.name, err)
		}
		b.res.Models[m.name] = m.rm
	}
	cs, err := b.coldStart(ctx)
	if err != nil {
		return b.res, fmt.Errorf("cold start: %w", err)
	}
	b.res.ColdStart = cs
	b.summarize(began)
	return b.res, nil
}

// summarize fills the headline figures and the targets.
func (b *runtimeBench) summarize(began time.Time) {
	r := &b.res
	h := r.Models[r.HeadlineModel]
	r.RPSBatched, r.RPSUnbatched, r.BatchingSpeedup = h.Batched.RPS, h.Unbatched.RPS, h.BatchingSpeedup
	r.P99MsBatched, r.P99MsUnbatched = h.Batched.P99Ms, h.Unbatched.P99Ms
	r.RSSMBPerReplica = h.Batched.RSSMBReady
	// The uncached start of record is the one over a network link when it
	// was measured: what the cache saves a node is the download, which
	// loopback makes nearly free (docs/decisions.md).
	uncached, speedup := r.ColdStart.Uncached.TotalS, r.ColdStart.Speedup
	if l := r.ColdStart.UncachedLink; l != nil {
		uncached, speedup = l.TotalS, r.ColdStart.SpeedupLink
	}
	r.ColdStartCachedS, r.ColdStartUncachedS = r.ColdStart.Cached.TotalS, uncached
	r.LoadAvgAfter = loadAvg()
	r.Seconds = round3(time.Since(began).Seconds())
	r.TargetsMet = map[string]bool{
		"onnx_batching_speedup_at_least_3_at_p99_no_worse":      r.Models["onnx"].TargetMet,
		"xgboost_batching_speedup_at_least_3_at_p99_no_worse":   r.Models["xgboost"].TargetMet,
		"onnx_demo_batching_speedup_at_least_3_at_p99_no_worse": r.Models["onnx_demo"].TargetMet,
		"cold_start_cached_at_least_2x_faster":                  speedup >= 2,
		"cold_start_model_at_least_200MB":                       r.ColdStart.ModelBytes >= 200_000_000,
	}
}

// summarizeModel turns a model's samples into its figures.
func summarizeModel(m *RuntimeModel) {
	for _, r := range []*RuntimeRun{m.Batched, m.Unbatched} {
		r.Requests = len(r.lat)
		if r.secs > 0 {
			r.RPS = math1(float64(len(r.lat)) / r.secs)
		}
		r.P50Ms, r.P99Ms = percentile(r.lat, 0.50), percentile(r.lat, 0.99)
	}
	if m.Unbatched.RPS > 0 {
		m.BatchingSpeedup = round3(m.Batched.RPS / m.Unbatched.RPS)
	}
	m.TargetMet = m.BatchingSpeedup >= 3 && m.Batched.P99Ms <= m.Unbatched.P99Ms && m.Batched.Errors == 0 && m.Unbatched.Errors == 0
}

// math1 rounds to one decimal.
func math1(f float64) float64 { return float64(int64(f*10+0.5)) / 10 }

// loadTest serves the model directory's model with a batched and an
// unbatched replica at once, both on the runtime core, and drives each in
// turn for the rounds with bodies (nil: random instances of the model's
// features), so that both see the same moments of a shared machine.
func (b *runtimeBench) loadTest(ctx context.Context, dir string, m *RuntimeModel, bodies []string) error {
	cfg, err := readModelConfig(dir)
	if err != nil {
		return err
	}
	if bodies == nil {
		bodies = predictBodies(cfg.Features, runtimeBodies)
	}
	m.Batched = &RuntimeRun{Batching: batchedSettings}
	m.Unbatched = &RuntimeRun{Batching: unbatchedSettings}
	runs := []*RuntimeRun{m.Batched, m.Unbatched}
	procs := make([]*runtimeProc, len(runs))
	for i, r := range runs {
		d, err := withBatching(dir, fmt.Sprintf("%s-%d", filepath.Base(dir), i), cfg, r.Batching)
		if err != nil {
			return err
		}
		p, err := b.startRuntime(ctx, d)
		if err != nil {
			return err
		}
		b.s.onClose(p.stop)
		procs[i] = p
		r.RSSMBReady = p.rssMB()
	}
	before := make([][2]float64, len(runs))
	for i, p := range procs {
		if before[i], err = p.inferenceCounts(ctx, b.client); err != nil {
			return err
		}
	}
	for round := range b.set.rounds {
		for k := range runs {
			i := (k + round) % len(runs)
			lat, errs, secs := b.load(ctx, "http://"+procs[i].addr+"/predict", bodies)
			runs[i].lat = append(runs[i].lat, lat...)
			runs[i].Errors += errs
			runs[i].secs += secs
		}
	}
	for i, p := range procs {
		after, err := p.inferenceCounts(ctx, b.client)
		if err != nil {
			return err
		}
		if execs := after[1] - before[i][1]; execs > 0 {
			runs[i].MeanBatchRows = round3((after[0] - before[i][0]) / execs)
		}
		runs[i].RSSMBAfter = p.rssMB()
		p.stop()
	}
	summarizeModel(m)
	return nil
}

// load drives u with the closed-loop clients for a phase after an
// unmeasured warm-up, each client sending one instance per request, and
// returns the latencies of the measured requests, the errors and the
// measured seconds.
func (b *runtimeBench) load(ctx context.Context, u string, bodies []string) ([]time.Duration, int, float64) {
	start := time.Now().Add(b.set.warmup)
	end := start.Add(b.set.phase)
	var (
		mu       sync.Mutex
		all      []time.Duration
		errs     atomic.Int64
		measured atomic.Int64
		last     atomic.Int64 // UnixNano of the last measured answer
		wg       sync.WaitGroup
	)
	for c := range b.set.clients {
		wg.Go(func() {
			mine := make([]time.Duration, 0, 1024)
			for k := 0; ; k++ {
				t0 := time.Now()
				if !t0.Before(end) || ctx.Err() != nil {
					break
				}
				if b.set.requests > 0 && !t0.Before(start) && measured.Add(1) > int64(b.set.requests) {
					break
				}
				_, err := predict(ctx, b.client, "", u, bodies[(c+k*b.set.clients)%len(bodies)])
				if t0.Before(start) {
					continue
				}
				now := time.Now()
				if err != nil {
					errs.Add(1)
					continue
				}
				mine = append(mine, now.Sub(t0))
				for {
					l := last.Load()
					if now.UnixNano() <= l || last.CompareAndSwap(l, now.UnixNano()) {
						break
					}
				}
			}
			mu.Lock()
			all = append(all, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	secs := time.Since(start).Seconds()
	if l := last.Load(); l > 0 {
		secs = time.Unix(0, l).Sub(start).Seconds()
	}
	return all, int(errs.Load()), max(secs, 0)
}

// predictBodies makes n /predict bodies of one instance each, an array of
// the features' values in order: numbers in [0, 100), categories drawn
// from their list. The seed is fixed so every run sends the same.
func predictBodies(features []serveapi.Feature, n int) []string {
	rng := rand.New(rand.NewPCG(14, 16))
	out := make([]string, n)
	for i := range out {
		vals := make([]any, len(features))
		for j, f := range features {
			if len(f.Categories) > 0 {
				vals[j] = f.Categories[rng.IntN(len(f.Categories))]
			} else {
				vals[j] = float32(rng.Float64() * 100)
			}
		}
		raw, _ := json.Marshal(map[string]any{"instances": []any{vals}})
		out[i] = string(raw)
	}
	return out
}

// readModelConfig reads a model directory's serving configuration.
func readModelConfig(dir string) (serveapi.Config, error) {
	var cfg serveapi.Config
	raw, err := os.ReadFile(filepath.Join(dir, serveapi.ConfigFile))
	if err != nil {
		return cfg, err
	}
	return cfg, json.Unmarshal(raw, &cfg)
}

// withBatching makes a sibling directory named name holding dir's model
// files (hard links) and cfg with batching b.
func withBatching(dir, name string, cfg serveapi.Config, b serveapi.Batching) (string, error) {
	out := filepath.Join(filepath.Dir(dir), name)
	if err := os.MkdirAll(out, 0o755); err != nil {
		return "", err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", err
	}
	for _, e := range entries {
		if e.Name() == serveapi.ConfigFile {
			continue
		}
		if err := os.Link(filepath.Join(dir, e.Name()), filepath.Join(out, e.Name())); err != nil {
			return "", err
		}
	}
	cfg.Batching = b
	return out, writeJSON(filepath.Join(out, serveapi.ConfigFile), cfg)
}

func writeJSON(path string, v any) error {
	raw, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, raw, 0o644)
}

// runtimeProc is a started built-in runtime.
type runtimeProc struct {
	cmd    *exec.Cmd
	addr   string
	exited chan struct{}
	// logs is the runtime's stderr, bounded; loadS and warmupS are read
	// from its ready line.
	mu      sync.Mutex
	logs    bytes.Buffer
	loadS   float64
	warmupS float64
	once    sync.Once
}

// startRuntime starts the catalogue's built-in runtime command on dir, on
// the runtime core when pinning, and waits until it is ready.
func (b *runtimeBench) startRuntime(ctx context.Context, dir string) (*runtimeProc, error) {
	p, err := b.spawnRuntime(dir)
	if err != nil {
		return nil, err
	}
	if err := p.waitReady(ctx, b.client); err != nil {
		p.stop()
		return nil, err
	}
	return p, nil
}

// spawnRuntime starts the runtime without waiting: the argv is the
// catalogue entry's, as the process driver runs it, with one thread for
// OpenMP and GOMAXPROCS from the affinity.
func (b *runtimeBench) spawnRuntime(dir string) (*runtimeProc, error) {
	port, err := freeport.Get()
	if err != nil {
		return nil, err
	}
	argv, err := catalog.Default()[catalog.Builtin].Expand(catalog.Vars{Self: b.set.self, ModelDir: dir, Host: "127.0.0.1", Port: port, Threads: 1})
	if err != nil {
		return nil, err
	}
	argv = pinned(b.res.Pinned, runtimeCoreName, argv...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = slices.DeleteFunc(os.Environ(), func(s string) bool {
		return strings.HasPrefix(s, "GOMAXPROCS=") || strings.HasPrefix(s, "OMP_NUM_THREADS=")
	})
	cmd.Env = append(cmd.Env, "OMP_NUM_THREADS=1", "MP_LOG_LEVEL=info")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &runtimeProc{cmd: cmd, addr: fmt.Sprintf("127.0.0.1:%d", port), exited: make(chan struct{})}
	go p.readLogs(stderr)
	go func() { _ = cmd.Wait(); close(p.exited) }()
	return p, nil
}

// readLogs keeps the runtime's stderr (its first 64 KiB) and reads load_s
// and warmup_s from its ready line.
func (p *runtimeProc) readLogs(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var rec struct {
			Msg     string  `json:"msg"`
			LoadS   float64 `json:"load_s"`
			WarmupS float64 `json:"warmup_s"`
		}
		p.mu.Lock()
		if json.Unmarshal(line, &rec) == nil && rec.Msg == "modelplane runtime ready" {
			p.loadS, p.warmupS = rec.LoadS, rec.WarmupS
		}
		if p.logs.Len() < 64<<10 {
			p.logs.Write(line)
			p.logs.WriteByte('\n')
		}
		p.mu.Unlock()
	}
}

func (p *runtimeProc) stderr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.TrimSpace(p.logs.String())
}

// waitReady polls /v2/health/ready, as the process driver does, until 200.
func (p *runtimeProc) waitReady(ctx context.Context, client *http.Client) error {
	deadline := time.Now().Add(readyTimeout)
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.addr+"/v2/health/ready", nil)
		if resp, err := client.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-p.exited:
			return fmt.Errorf("runtime exited before ready (%s): %s", p.cmd.ProcessState, p.stderr())
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("runtime not ready within %s: %s", readyTimeout, p.stderr())
		}
		time.Sleep(readyPoll)
	}
}

// rssMB is the process's VmRSS in MB (10^6 bytes); 0 where unreadable.
func (p *runtimeProc) rssMB() float64 {
	kb, _ := vmRSSKB(p.cmd.Process.Pid)
	return math1(float64(kb) * 1024 / 1e6)
}

// vmRSSKB reads VmRSS (kB) from /proc/pid/status.
func vmRSSKB(pid int) (int64, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	return parseVmRSS(raw)
}

// parseVmRSS finds the VmRSS line of a /proc/pid/status file.
func parseVmRSS(status []byte) (int64, error) {
	for line := range strings.SplitSeq(string(status), "\n") {
		rest, ok := strings.CutPrefix(line, "VmRSS:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("VmRSS line %q", line)
		}
		return strconv.ParseInt(f[0], 10, 64)
	}
	return 0, errors.New("no VmRSS line")
}

// inferenceCounts reads nv_inference_count (rows) and
// nv_inference_exec_count (executions) from /metrics.
func (p *runtimeProc) inferenceCounts(ctx context.Context, client *http.Client) ([2]float64, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.addr+"/metrics", nil)
	resp, err := client.Do(req)
	if err != nil {
		return [2]float64{}, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return [2]float64{}, err
	}
	return parseInferenceCounts(raw), nil
}

// parseInferenceCounts sums the nv_inference_count and
// nv_inference_exec_count samples of a Prometheus text exposition.
func parseInferenceCounts(text []byte) [2]float64 {
	var out [2]float64
	for line := range strings.SplitSeq(string(text), "\n") {
		name, _, _ := strings.Cut(line, "{")
		name, _, _ = strings.Cut(name, " ")
		i := slices.Index([]string{"nv_inference_count", "nv_inference_exec_count"}, name)
		if i < 0 {
			continue
		}
		f := strings.Fields(line)
		if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
			out[i] += v
		}
	}
	return out
}

// stop sends SIGTERM, as the process driver drains, and kills the runtime
// if it has not ended within 10 seconds.
func (p *runtimeProc) stop() {
	p.once.Do(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(10 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
	})
}

// loadAvg is /proc/loadavg's first three fields.
func loadAvg() string {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(raw))
	return strings.Join(f[:min(3, len(f))], " ")
}

// coldStart serves a large MLP's manifest and file from an artifact
// endpoint over the real artifact store and measures, for each run, a
// replica started from an empty cache and one started from the files that
// run cached.
func (b *runtimeBench) coldStart(ctx context.Context) (*ColdStart, error) {
	root := filepath.Join(b.s.dir, "cold")
	src, rm, err := b.writeONNXAt(filepath.Join(root, "src"), "cold", b.set.cold)
	if err != nil {
		return nil, err
	}
	cs := &ColdStart{Model: rm.Model, ModelBytes: rm.FileBytes, ModelMB: math1(float64(rm.FileBytes) / 1e6), Runs: b.set.coldRuns,
		ServedBy: "an in-process server of GET /internal/artifacts/{sha256} (bearer token, Range, ETag by digest) over artifact.Store, " +
			"which the version's upload (artifact.Upload) filled; no PostgreSQL or registry"}
	store, err := artifact.NewStore(filepath.Join(root, "store"))
	if err != nil {
		return nil, err
	}
	manifest, err := uploadVersion(ctx, store, src)
	if err != nil {
		return nil, err
	}
	addr, err := b.s.serve(artifactServer(store, runtimeToken, 0))
	if err != nil {
		return nil, err
	}
	servers := map[string]string{"uncached": addr, "cached": addr}
	kinds := []string{"uncached", "cached"}
	if b.set.linkMbps > 0 {
		cs.LinkMbps = b.set.linkMbps
		if servers["link"], err = b.s.serve(artifactServer(store, runtimeToken, b.set.linkMbps)); err != nil {
			return nil, err
		}
		kinds = append(kinds, "link")
	}
	cfg, err := readModelConfig(src)
	if err != nil {
		return nil, err
	}
	cfg.Batching = batchedSettings
	settings, _ := json.Marshal(cfg)
	// Each run: an empty cache, then the same cache reopened, then (over
	// the paced link) another empty one.
	samples := map[string][]coldSample{}
	for run := range b.set.coldRuns {
		for _, kind := range kinds {
			dir := filepath.Join(root, fmt.Sprintf("cache-%d", run))
			if kind == "link" {
				dir += "-link"
			}
			spec := busapi.ReplicaSpec{ID: fmt.Sprintf("cold-%s-%d", kind, run), Model: "cold", Version: "v1", Runtime: "onnxruntime",
				Format: "onnx", Manifest: manifest, Settings: settings}
			smp, err := b.coldOnce(ctx, dir, "http://"+servers[kind], spec)
			if err != nil {
				return nil, fmt.Errorf("%s run %d: %w", kind, run, err)
			}
			samples[kind] = append(samples[kind], smp)
			if kind != "uncached" {
				if err := os.RemoveAll(dir); err != nil {
					return nil, err
				}
			}
		}
	}
	cs.Uncached, cs.Cached = coldMedians(samples["uncached"]), coldMedians(samples["cached"])
	if cs.Cached.TotalS > 0 {
		cs.Speedup = round3(cs.Uncached.TotalS / cs.Cached.TotalS)
	}
	if s := samples["link"]; len(s) > 0 {
		ph := coldMedians(s)
		cs.UncachedLink = &ph
		if cs.Cached.TotalS > 0 {
			cs.SpeedupLink = round3(ph.TotalS / cs.Cached.TotalS)
		}
	}
	return cs, nil
}

// coldSample is one cold start's times, in seconds.
type coldSample struct {
	total, prepare, download, verify, ready, load, warmup, rss float64
	fetched                                                    int
}

// coldOnce opens a cache on dir, as an agent starting would, prepares the
// replica and starts its runtime, and times both until ready.
func (b *runtimeBench) coldOnce(ctx context.Context, dir, url string, spec busapi.ReplicaSpec) (coldSample, error) {
	c, err := cache.New(cache.Config{Dir: dir, URL: url, Token: runtimeToken, Egress: &egress.Policy{AllowLoopback: true}})
	if err != nil {
		return coldSample{}, err
	}
	t0 := time.Now()
	prep, err := c.Prepare(ctx, spec)
	if err != nil {
		return coldSample{}, err
	}
	t1 := time.Now()
	p, err := b.startRuntime(ctx, prep.Dir)
	if err != nil {
		return coldSample{}, err
	}
	t2 := time.Now()
	rss := p.rssMB()
	p.stop()
	c.Release(spec.ID)
	p.mu.Lock()
	load, warm := p.loadS, p.warmupS
	p.mu.Unlock()
	return coldSample{total: t2.Sub(t0).Seconds(), prepare: t1.Sub(t0).Seconds(), download: prep.Download.Seconds(),
		verify: prep.Verify.Seconds(), ready: t2.Sub(t1).Seconds(), load: load, warmup: warm, rss: rss, fetched: prep.Fetched}, nil
}

// coldMedians is the median of each figure of the samples.
func coldMedians(s []coldSample) ColdPhase {
	med := func(f func(coldSample) float64) float64 {
		v := make([]float64, len(s))
		for i := range s {
			v[i] = f(s[i])
		}
		return round3(medianF(v))
	}
	ph := ColdPhase{
		TotalS: med(func(c coldSample) float64 { return c.total }), PrepareS: med(func(c coldSample) float64 { return c.prepare }),
		DownloadS: med(func(c coldSample) float64 { return c.download }), VerifyS: med(func(c coldSample) float64 { return c.verify }),
		StartToReadyS: med(func(c coldSample) float64 { return c.ready }), LoadS: med(func(c coldSample) float64 { return c.load }),
		WarmupS: med(func(c coldSample) float64 { return c.warmup }), RSSMB: math1(med(func(c coldSample) float64 { return c.rss })),
	}
	for _, c := range s {
		ph.TotalsS = append(ph.TotalsS, round3(c.total))
		ph.Fetched = max(ph.Fetched, c.fetched)
	}
	return ph
}

// medianF is the median of v (the mean of the middle two for an even
// count); 0 for none.
func medianF(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	v = slices.Clone(v)
	slices.Sort(v)
	n := len(v)
	if n%2 == 1 {
		return v[n/2]
	}
	return (v[n/2-1] + v[n/2]) / 2
}

// uploadVersion stores every file of dir but the serving configuration as
// one version, through artifact.Upload as the registry's upload does, and
// the version's canonical manifest as a blob, as the registry stores it;
// it returns the manifest's digest.
func uploadVersion(ctx context.Context, store *artifact.Store, dir string) (string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", err
	}
	man := artifact.Manifest{}
	for _, e := range entries {
		if e.Name() == serveapi.ConfigFile {
			continue
		}
		d, err := fileDigest(filepath.Join(dir, e.Name()))
		if err != nil {
			return "", err
		}
		man[e.Name()] = d
	}
	up := artifact.NewUpload(store, man, artifact.Limits{})
	for _, p := range man.Paths() {
		f, err := os.Open(filepath.Join(dir, p))
		if err != nil {
			return "", err
		}
		err = up.Add(ctx, p, f)
		f.Close()
		if err != nil {
			return "", err
		}
	}
	if _, err := up.Finish(); err != nil {
		return "", err
	}
	up.Release()
	c := man.Canonical()
	if _, err := store.Put(ctx, "manifest.json", bytes.NewReader(c), int64(len(c))); err != nil {
		return "", err
	}
	return man.Digest(), nil
}

func fileDigest(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// artifactServer answers GET /internal/artifacts/{sha256} from store as
// the control plane's handler does: the agents' bearer token, the blob
// streamed with Range and If-Range, its digest as the strong ETag. With
// mbps > 0 it sends no faster than that many megabits per second.
func artifactServer(store *artifact.Store, token string, mbps int) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /internal/artifacts/{sha256}", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+token {
			http.Error(w, "node agent credentials required", http.StatusUnauthorized)
			return
		}
		d := r.PathValue("sha256")
		f, err := store.Open(d)
		if errors.Is(err, artifact.ErrNotFound) {
			http.NotFound(w, r)
			return
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		defer f.Close()
		st, err := f.Stat()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("ETag", `"`+d+`"`)
		if mbps > 0 {
			w = &pacedWriter{ResponseWriter: w, bytesPerSec: float64(mbps) * 1e6 / 8, start: time.Now()}
		}
		http.ServeContent(w, r, "", st.ModTime(), f)
	})
	return mux
}

// pacedWriter writes no faster than bytesPerSec since start, in pieces of
// 64 KiB: a network link's pace on loopback.
type pacedWriter struct {
	http.ResponseWriter
	bytesPerSec float64
	start       time.Time
	sent        int64
}

func (p *pacedWriter) Write(b []byte) (int, error) {
	written := 0
	for len(b) > 0 {
		n, err := p.ResponseWriter.Write(b[:min(len(b), 64<<10)])
		written += n
		p.sent += int64(n)
		b = b[n:]
		if err != nil {
			return written, err
		}
		due := p.start.Add(time.Duration(float64(p.sent) / p.bytesPerSec * float64(time.Second)))
		if d := time.Until(due); d > 0 {
			time.Sleep(d)
		}
	}
	return written, nil
}
