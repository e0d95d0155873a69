package app

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"sort"
	"sync"
	"time"

	"modelplane/auth"
	"modelplane/db"
	"modelplane/internal/pgproc"
	"modelplane/migrations"
	"modelplane/sim/scenario"
	"modelplane/tenant"
)

// BenchConfig configures `modelplane bench`.
type BenchConfig struct {
	JSON     bool
	Duration time.Duration
	Clients  int
	Profile  string
	// Gateways is how many gateways `bench rollback` runs.
	Gateways int
	// RawGPUs is how many GPUs `bench chargeback` meters per second for its
	// raw day (default 500).
	RawGPUs int
}

// Flags registers the bench settings on fs.
func (c *BenchConfig) Flags(fs *flag.FlagSet) {
	fs.BoolVar(&c.JSON, "json", false, "print one JSON object")
	fs.DurationVar(&c.Duration, "duration", 20*time.Second, "how long to drive load")
	fs.IntVar(&c.Clients, "clients", 50, "concurrent clients")
	fs.StringVar(&c.Profile, "cpuprofile", "", "write a CPU profile of the load phase to this file")
	fs.IntVar(&c.Gateways, "gateways", rbBenchGateways, "gateways watching the routing table (bench rollback)")
	fs.IntVar(&c.RawGPUs, "raw-gpus", 500, "bench chargeback: GPUs in the per-second raw day")
}

// BenchResult is what a benchmark prints.
type BenchResult struct {
	Name     string  `json:"name"`
	P50Ms    float64 `json:"p50_ms"`
	P99Ms    float64 `json:"p99_ms"`
	RPS      float64 `json:"rps"`
	Requests int     `json:"requests"`
	Errors   int     `json:"errors"`
	Teams    int     `json:"teams"`
	Endpts   int     `json:"endpoints"`
	Versions int     `json:"versions"`
	Clients  int     `json:"clients"`
	Seconds  float64 `json:"seconds"`
	// RouteP99Ms is the p99 of each kind of request, to see where time goes.
	RouteP99Ms map[string]float64 `json:"route_p99_ms"`
}

// benchUsage lists every benchmark and its flags.
const benchUsage = `usage: modelplane bench api [--json] [--duration 20s] [--clients 50]
       modelplane bench engine [--json]
       modelplane bench placement [--json]
       modelplane bench ingest [--json]
       modelplane bench gateway [--json] [--cpuprofile file]
       modelplane bench rollback [--json] [--gateways 50]
       modelplane bench chargeback [--json] [--raw-gpus 500]
       modelplane bench drift [--json]`

// RunBench runs the named benchmark and prints its result.
func RunBench(ctx context.Context, cfg BenchConfig, args []string, out io.Writer) error {
	if len(args) != 1 {
		return errors.New(benchUsage)
	}
	switch args[0] {
	case "engine":
		return runBenchEngine(ctx, cfg, out)
	case "placement":
		return runBenchPlacement(ctx, cfg, out)
	case "ingest":
		return runBenchIngest(ctx, cfg, out)
	case "gateway":
		return runBenchGateway(ctx, cfg, out)
	case "rollback":
		return runBenchRollback(ctx, cfg, out)
	case "chargeback":
		return runBenchChargeback(ctx, cfg, out)
	case "drift":
		return runBenchDrift(ctx, cfg, out)
	case "api":
	default:
		return errors.New(benchUsage)
	}
	res, err := benchAPI(ctx, cfg)
	if err != nil {
		return err
	}
	if cfg.JSON {
		return json.NewEncoder(out).Encode(res)
	}
	_, err = fmt.Fprintf(out, "api: p50 %.2f ms, p99 %.2f ms, %.0f req/s over %d requests (%d errors)\n", res.P50Ms, res.P99Ms, res.RPS, res.Requests, res.Errors)
	return err
}

// benchAPI seeds 50 teams, 1,000 endpoints and 10,000 versions in a private
// PostgreSQL, then drives the main list and detail pages and API reads with
// concurrent clients over real HTTP.
func benchAPI(ctx context.Context, cfg BenchConfig) (BenchResult, error) {
	dir, err := os.MkdirTemp("", "mp-bench-")
	if err != nil {
		return BenchResult{}, err
	}
	defer os.RemoveAll(dir)
	_ = os.Chmod(dir, 0o755)
	pg, err := pgproc.Start(ctx, filepath.Join(dir, "pg"))
	if err != nil {
		return BenchResult{}, err
	}
	defer pg.Stop()
	pool, err := db.Open(ctx, pg.URL("postgres"))
	if err != nil {
		return BenchResult{}, err
	}
	defer pool.Close()
	if err := migrations.Postgres(ctx, pool); err != nil {
		return BenchResult{}, err
	}
	const teams, endpoints, versionsPerModel = 50, 1000, 10
	seed := `
INSERT INTO teams (name) SELECT 'team-' || g FROM generate_series(1, 50) g;
INSERT INTO users (issuer, subject, email) SELECT 'bench', 'u' || g, 'u' || g || '@example.com' FROM generate_series(1, 50) g;
INSERT INTO team_members (team_id, user_id, role) SELECT g, g, 'admin' FROM generate_series(1, 50) g;
INSERT INTO models (team_id, name, task, feature_names) SELECT 1 + (g % 50), 'model-' || g, 'classification', '{a,b,c}' FROM generate_series(1, 1000) g;
INSERT INTO model_versions (model_id, team_id, name, format, runtime, artifact_uri, manifest, size_bytes, parent_version)
  SELECT m.id, m.team_id, 'v' || v, 'safetensors', 'onnxruntime', 'sha256-manifest:' || md5(m.id || '-' || v),
         '{"model.safetensors":"` + "0000000000000000000000000000000000000000000000000000000000000000" + `"}', 1024, CASE WHEN v > 1 THEN 'v' || (v - 1) ELSE '' END
  FROM models m, generate_series(1, 10) v;
INSERT INTO endpoints (team_id, name, model_id, runtime, instance_profile, min_replicas, max_replicas, tier)
  SELECT m.team_id, 'endpoint-' || m.id, m.id, 'onnxruntime', 'mig-1g.10gb', 1, 4, 'standard' FROM models m;
INSERT INTO routing_rules (endpoint_id, version_id, weight)
  SELECT e.id, v.id, CASE WHEN v.name = 'v10' THEN 90 ELSE 10 END FROM endpoints e JOIN model_versions v ON v.model_id = e.model_id AND v.name IN ('v9', 'v10');
ANALYZE;`
	if _, err := pool.Exec(ctx, seed); err != nil {
		return BenchResult{}, fmt.Errorf("seed: %w", err)
	}
	h, err := controlPlane{Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Pool: pool, ArtifactDir: filepath.Join(dir, "artifacts"), MaxUploadBytes: 1 << 30,
		Sessions: auth.SessionConfig{IdleTimeout: time.Hour, AbsoluteTimeout: time.Hour}}.handler()
	if err != nil {
		return BenchResult{}, err
	}
	h.Ready = nil
	keys := make([]string, teams)
	cookies := make([]string, teams)
	for i := range teams {
		p := auth.System("bench")
		raw, _, err := h.Tenant.CreateKey(ctx, p, tenantKey(fmt.Sprintf("team-%d", i+1)))
		if err != nil {
			return BenchResult{}, err
		}
		keys[i] = raw
		tok, _, err := h.Sessions.Create(ctx, int64(i+1))
		if err != nil {
			return BenchResult{}, err
		}
		cookies[i] = tok
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return BenchResult{}, err
	}
	srv := &http.Server{Handler: h.Handler()}
	go srv.Serve(ln)
	defer srv.Close()
	base := "http://" + ln.Addr().String()

	// Each client is one team's admin. Model i belongs to team 1+(i%50); it
	// walks its own team's endpoints and models.
	type target struct {
		kind, path string
		portal     bool
	}
	var mu sync.Mutex
	var lat []time.Duration
	byKind := map[string][]time.Duration{}
	var errs int
	if cfg.Profile != "" {
		f, err := os.Create(cfg.Profile)
		if err != nil {
			return BenchResult{}, err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return BenchResult{}, err
		}
		defer pprof.StopCPUProfile()
	}
	// Two seconds of warm-up (connections, prepared statements, caches) are
	// not measured: at the start every client would otherwise hit the first
	// route cold at once.
	start := time.Now().Add(2 * time.Second)
	deadline := start.Add(cfg.Duration)
	var wg sync.WaitGroup
	tr := &http.Transport{MaxIdleConnsPerHost: cfg.Clients * 2}
	for c := range cfg.Clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			team := c % teams
			client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
			var mine []time.Duration
			kinds := map[string][]time.Duration{}
			bad := 0
			for n := 0; time.Now().Before(deadline); n++ {
				model := team + teams*((n%(endpoints/teams))+0)
				if model == 0 {
					model = teams
				}
				targets := []target{
					{"api endpoints list", "/api/v1/endpoints?limit=50", false},
					{"api endpoint", fmt.Sprintf("/api/v1/endpoints/endpoint-%d", model), false},
					{"api versions list", fmt.Sprintf("/api/v1/models/model-%d/versions", model), false},
					{"api models list", "/api/v1/models?limit=50", false},
					{"portal endpoints", "/endpoints", true},
					{"portal endpoint", fmt.Sprintf("/endpoints/endpoint-%d", model), true},
					{"portal model", fmt.Sprintf("/models/model-%d", model), true},
				}
				t := targets[n%len(targets)]
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+t.path, nil)
				if t.portal {
					req.AddCookie(&http.Cookie{Name: auth.SessionCookie, Value: cookies[team]})
				} else {
					req.Header.Set("Authorization", "Bearer "+keys[team])
				}
				t0 := time.Now()
				resp, err := client.Do(req)
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				if t0.Before(start) {
					continue
				}
				d := time.Since(t0)
				mine = append(mine, d)
				kinds[t.kind] = append(kinds[t.kind], d)
				if err != nil || resp.StatusCode != http.StatusOK {
					bad++
				}
			}
			mu.Lock()
			lat = append(lat, mine...)
			for k, v := range kinds {
				byKind[k] = append(byKind[k], v...)
			}
			errs += bad
			mu.Unlock()
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	routes := map[string]float64{}
	for k, v := range byKind {
		routes[k] = percentile(v, 0.99)
	}
	return BenchResult{Name: "api", P50Ms: percentile(lat, 0.50), P99Ms: percentile(lat, 0.99), RouteP99Ms: routes, RPS: float64(len(lat)) / elapsed.Seconds(), Requests: len(lat), Errors: errs,
		Teams: teams, Endpts: endpoints, Versions: endpoints * versionsPerModel, Clients: cfg.Clients, Seconds: elapsed.Seconds()}, nil
}

func tenantKey(team string) tenant.KeyRequest {
	return tenant.KeyRequest{Name: "bench", Team: team, Role: auth.RoleViewer}
}

// percentile sorts d and returns its p-th percentile in milliseconds.
func percentile(d []time.Duration, p float64) float64 {
	if len(d) == 0 {
		return 0
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return float64(d[int(p*float64(len(d)-1))].Microseconds()) / 1000
}

// EngineBenchResult is what `modelplane bench engine` prints: the fleet
// engine's speed and the paged KV cache and continuous batching measured
// against their baselines, on the seed-fleet scenario.
type EngineBenchResult struct {
	Name string `json:"name"`
	// SimSpeedup is simulated seconds per wall second of the seed-fleet run
	// on one core (GOMAXPROCS 1).
	SimSpeedup float64 `json:"sim_speedup_vs_realtime"`
	// KVWastePagedPct and KVWasteContiguousPct are v42's time-averaged KV
	// waste in the run: allocated page slots holding no token, and slots a
	// contiguous engine reserving ContiguousMaxLen per sequence would leave
	// empty (see scenario.VersionReport).
	KVWastePagedPct      float64 `json:"kv_waste_paged_pct"`
	KVWasteContiguousPct float64 `json:"kv_waste_contiguous_pct"`
	// ContinuousVsStatic is continuous over static batching's throughput at
	// equal median latency on one GPU (see scenario.CompareBatching).
	ContinuousVsStatic float64 `json:"continuous_vs_static_throughput"`

	Scenario         string  `json:"scenario"`
	GOMAXPROCS       int     `json:"gomaxprocs"`
	GPUs             int     `json:"gpus"`
	OfferedRPS       float64 `json:"offered_rps"`
	CompletedRPS     float64 `json:"completed_rps"`
	SimSeconds       float64 `json:"sim_seconds"`
	WallSeconds      float64 `json:"wall_seconds"`
	Steps            int64   `json:"steps"`
	Tokens           int64   `json:"tokens"`
	ContiguousMaxLen int     `json:"contiguous_max_len"`
	KVUtilization    float64 `json:"kv_utilization"`
	MeanBatch        float64 `json:"mean_batch_per_gpu"`
	TTFTP50Ms        float64 `json:"ttft_p50_ms"`
	TTFTP99Ms        float64 `json:"ttft_p99_ms"`
	TPOTP50Ms        float64 `json:"tpot_p50_ms"`
	TPOTP99Ms        float64 `json:"tpot_p99_ms"`
	// Batching is the whole continuous-vs-static comparison.
	Batching scenario.Comparison `json:"batching"`
	// TargetsMet says, for each target of the engine issue, whether it was
	// met.
	TargetsMet map[string]bool `json:"targets_met"`
}

// runBenchEngine runs the seed-fleet scenario on one core and the batching
// comparison, and prints the result. --duration and --clients are the api
// benchmark's and are ignored: the scenario fixes its own duration.
func runBenchEngine(ctx context.Context, cfg BenchConfig, out io.Writer) error {
	res, err := benchEngine(ctx)
	if err != nil {
		return err
	}
	if cfg.JSON {
		return json.NewEncoder(out).Encode(res)
	}
	_, err = fmt.Fprintf(out, "engine: %s on %d GPUs simulated %.0f s in %.2f s on one core (%.1fx real time); KV waste paged %.1f%%, contiguous@%d %.1f%%; continuous/static throughput at equal median latency %.1fx\n",
		res.Scenario, res.GPUs, res.SimSeconds, res.WallSeconds, res.SimSpeedup, res.KVWastePagedPct, res.ContiguousMaxLen, res.KVWasteContiguousPct, res.ContinuousVsStatic)
	return err
}

func benchEngine(ctx context.Context) (EngineBenchResult, error) {
	const name, version = "seed-fleet", "v42"
	prev := runtime.GOMAXPROCS(1)
	defer runtime.GOMAXPROCS(prev)
	sc, err := scenario.Builtin(name)
	if err != nil {
		return EngineBenchResult{}, err
	}
	runtime.GC() // start the timed run without the previous garbage
	rep, err := scenario.Run(ctx, sc, scenario.Options{Now: time.Now})
	if err != nil {
		return EngineBenchResult{}, err
	}
	v, ok := rep.Version(version)
	if !ok || len(v.Contiguous) == 0 {
		return EngineBenchResult{}, fmt.Errorf("scenario %s has no version %s", name, version)
	}
	cmp, err := scenario.CompareBatching(ctx, sc, version, 0)
	if err != nil {
		return EngineBenchResult{}, err
	}
	res := EngineBenchResult{
		Name:                 "engine",
		SimSpeedup:           rep.SpeedUp,
		KVWastePagedPct:      v.KVWastePagedPct,
		KVWasteContiguousPct: v.Contiguous[0].WastePct,
		ContinuousVsStatic:   cmp.Ratio,
		Scenario:             name,
		GOMAXPROCS:           1,
		GPUs:                 rep.GPUs,
		OfferedRPS:           rep.Rate,
		CompletedRPS:         v.CompletedPerSecond,
		SimSeconds:           rep.SimSeconds,
		WallSeconds:          rep.WallSeconds,
		Steps:                rep.Steps,
		Tokens:               rep.Tokens,
		ContiguousMaxLen:     v.Contiguous[0].MaxLen,
		KVUtilization:        v.KVUtilization,
		MeanBatch:            v.MeanBatch,
		TTFTP50Ms:            v.TTFT.P50,
		TTFTP99Ms:            v.TTFT.P99,
		TPOTP50Ms:            v.TPOT.P50,
		TPOTP99Ms:            v.TPOT.P99,
		Batching:             cmp,
	}
	res.TargetsMet = map[string]bool{
		"sim_speedup_at_least_10x":           res.SimSpeedup >= 10,
		"kv_waste_paged_at_most_4pct":        res.KVWastePagedPct <= 4,
		"kv_waste_contiguous_at_least_60pct": res.KVWasteContiguousPct >= 60,
		"continuous_at_least_2x_static":      res.ContinuousVsStatic >= 2,
	}
	return res, nil
}
