package bench

import (
	"context"
	"fmt"
	"io"
	"runtime"

	"github.com/coder/quartz"

	"modelplane/sim/scenario"
)

// EngineResult is what `modelplane bench engine` prints: the fleet
// engine's speed and the paged KV cache and continuous batching measured
// against their baselines, on the seed-fleet scenario.
type EngineResult struct {
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

// runEngine runs the seed-fleet scenario on one core and the batching
// comparison, and prints the result. --duration and --clients are the api
// benchmark's and are ignored: the scenario fixes its own duration.
func runEngine(ctx context.Context, cfg Config, out io.Writer) error {
	res, err := measureEngine(ctx)
	if err != nil {
		return err
	}
	return emit(out, cfg.JSON, res, "engine: %s on %d GPUs simulated %.0f s in %.2f s on one core (%.1fx real time); KV waste paged %.1f%%, contiguous@%d %.1f%%; continuous/static throughput at equal median latency %.1fx\n",
		res.Scenario, res.GPUs, res.SimSeconds, res.WallSeconds, res.SimSpeedup, res.KVWastePagedPct, res.ContiguousMaxLen, res.KVWasteContiguousPct, res.ContinuousVsStatic)
}

// measureEngine times the seed-fleet scenario on one core, reads v42's KV
// waste from its report and compares continuous with static batching.
func measureEngine(ctx context.Context) (EngineResult, error) {
	const name, version = "seed-fleet", "v42"
	prev := runtime.GOMAXPROCS(1)
	defer runtime.GOMAXPROCS(prev)
	sc, err := scenario.Builtin(name)
	if err != nil {
		return EngineResult{}, err
	}
	runtime.GC() // start the timed run without the previous garbage
	rep, err := scenario.Run(ctx, sc, scenario.Options{Clock: quartz.NewReal()})
	if err != nil {
		return EngineResult{}, err
	}
	v, ok := rep.Version(version)
	if !ok || len(v.Contiguous) == 0 {
		return EngineResult{}, fmt.Errorf("scenario %s has no version %s", name, version)
	}
	cmp, err := scenario.CompareBatching(ctx, sc, version, 0)
	if err != nil {
		return EngineResult{}, err
	}
	res := EngineResult{
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
