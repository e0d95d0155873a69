package scenario

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"modelplane/engine"
	"modelplane/sim"
)

// Comparison is continuous against static batching on one GPU, at equal
// median end-to-end latency (see CompareBatching).
type Comparison struct {
	Version string `json:"version"`
	// Requests is the number of requests offered at every load tried.
	Requests int `json:"requests"`
	// CapacityRPS is what continuous batching completes per second with
	// every request queued at once.
	CapacityRPS float64 `json:"capacity_rps"`
	// LoadFraction of CapacityRPS is the load that sets the latency target:
	// LatencyTarget is continuous batching's median end-to-end latency
	// there.
	LoadFraction  float64 `json:"load_fraction"`
	LatencyTarget float64 `json:"latency_target_ms"`
	// ContinuousRPS and StaticRPS are the highest loads, in requests per
	// second, at which each engine's median end-to-end latency stays within
	// the target; StaticBatch is the batch size that does best for static
	// batching there. ContinuousMedian and StaticMedian are the medians
	// reached, in milliseconds.
	ContinuousRPS    float64 `json:"continuous_rps"`
	StaticRPS        float64 `json:"static_rps"`
	StaticBatch      int     `json:"static_batch"`
	ContinuousMedian float64 `json:"continuous_median_ms"`
	StaticMedian     float64 `json:"static_median_ms"`
	// Ratio is ContinuousRPS / StaticRPS: the throughput continuous
	// batching sustains over static batching's at equal median latency.
	Ratio float64 `json:"ratio"`
	// StaticCapacityRPS is static batching's best throughput with every
	// request queued at once, whatever the latency (best batch size
	// StaticCapacityBatch): the ratio of capacities, CapacityRPS over it,
	// is the comparison without a latency target.
	StaticCapacityRPS   float64 `json:"static_capacity_rps"`
	StaticCapacityBatch int     `json:"static_capacity_batch"`
}

// DefaultCompareRequests is the number of requests CompareBatching offers
// at each load when not told.
const DefaultCompareRequests = 2000

// CompareBatching measures the throughput of continuous batching (a
// engine.Scheduler, as in the fleet) against static batching (RunStatic) on
// one GPU of the named version, with the scenario's length mix, at equal
// median end-to-end latency. Both engines see the same requests: Poisson
// arrivals (the scenario's seed) whose times are scaled to each load tried,
// so only the load changes between tries.
//
// How the latencies are matched: the continuous engine's capacity is
// measured with every request queued at once; its median end-to-end latency
// at 80 percent of that capacity is the target. For each engine, bisection
// on the load then finds the highest load whose median stays within the
// target (static batching takes, at each load, the best of batch sizes 1,
// 2, 4, ... 256). The ratio of the two loads is the answer: how much more
// traffic continuous batching serves at the same median latency.
//
// requests is the number of requests offered at each load (0:
// DefaultCompareRequests); more gives steadier medians and takes longer.
func CompareBatching(ctx context.Context, sc Scenario, version string, requests int) (Comparison, error) {
	sc = sc.WithDefaults()
	if err := sc.Validate(); err != nil {
		return Comparison{}, err
	}
	vi := slices.IndexFunc(sc.Versions, func(v Version) bool { return v.Name == version })
	if vi < 0 {
		return Comparison{}, fmt.Errorf("no version %q in scenario %s", version, sc.Name)
	}
	p := sc.Versions[vi].Profile
	out := sc.OutputTokens
	if out == nil {
		out = p.OutputTokens
	}
	if out == nil {
		return Comparison{}, errors.New("comparing batching needs output_tokens in the scenario or the profile")
	}
	n := requests
	if n <= 0 {
		n = DefaultCompareRequests
	}
	r := rand.New(rand.NewPCG(sc.Seed, streamArrivals))
	lr := rand.New(rand.NewPCG(sc.Seed, streamLengths))
	base := make([]engine.Request, n)
	var at float64 // arrival at rate 1
	for i := range base {
		at += r.ExpFloat64()
		base[i] = engine.Request{ID: strconv.Itoa(i), PromptTokens: sc.PromptTokens.Draw(lr), OutputTokens: out.Draw(lr), MaxTokens: sc.MaxTokens}
		base[i].Arrival = time.Duration(at * float64(time.Second)) // at rate 1; see atRate
	}
	atRate := func(rate float64) []engine.Request {
		reqs := slices.Clone(base)
		for i := range reqs {
			reqs[i].Arrival = time.Duration(float64(base[i].Arrival) / rate)
		}
		return reqs
	}
	continuous := func(reqs []engine.Request) (sim.Report, error) {
		s, err := sim.NewScheduler(sim.Config{Profile: p, Seed: sc.Seed})
		if err != nil {
			return sim.Report{}, err
		}
		return sim.RunVirtual(s, reqs), nil
	}
	median := func(rep sim.Report) time.Duration {
		e2e := make([]time.Duration, len(rep.Results))
		for i, res := range rep.Results {
			e2e[i] = res.Done - res.Arrival
		}
		return engine.PercentilesOf(e2e).P50
	}

	c := Comparison{Version: version, Requests: n, LoadFraction: 0.8}
	all := slices.Clone(base)
	for i := range all {
		all[i].Arrival = 0
	}
	sat, err := continuous(all)
	if err != nil {
		return Comparison{}, err
	}
	c.CapacityRPS = sat.RequestsPerSecond
	if c.CapacityRPS <= 0 {
		return Comparison{}, errors.New("continuous batching completed nothing")
	}
	for b := 1; b <= min(256, p.MaxBatch); b *= 2 {
		rep, err := RunStatic(p, b, all)
		if err != nil {
			return Comparison{}, err
		}
		if rep.RequestsPerSecond > c.StaticCapacityRPS {
			c.StaticCapacityRPS, c.StaticCapacityBatch = rep.RequestsPerSecond, b
		}
	}
	ref, err := continuous(atRate(c.LoadFraction * c.CapacityRPS))
	if err != nil {
		return Comparison{}, err
	}
	target := median(ref)
	c.LatencyTarget = msOf(target)

	contMedian := func(rate float64) (time.Duration, int, error) {
		rep, err := continuous(atRate(rate))
		return median(rep), 0, err
	}
	staticMedian := func(rate float64) (time.Duration, int, error) {
		best, bestBatch := time.Duration(-1), 0
		reqs := atRate(rate)
		for b := 1; b <= min(256, p.MaxBatch); b *= 2 {
			rep, err := RunStatic(p, b, reqs)
			if err != nil {
				return 0, 0, err
			}
			if m := rep.E2E.P50; rep.Completed > 0 && (best < 0 || m < best) {
				best, bestBatch = m, b
			}
		}
		return best, bestBatch, nil
	}
	// highest finds the highest load in (0, 2 × capacity] whose median is
	// within the target, by bisection.
	highest := func(med func(float64) (time.Duration, int, error)) (float64, time.Duration, int, error) {
		lo, hi := c.CapacityRPS/1000, 2*c.CapacityRPS
		m, b, err := med(lo)
		if err != nil || m < 0 || m > target {
			return 0, m, b, err
		}
		for range 24 {
			if err := ctx.Err(); err != nil {
				return 0, 0, 0, err
			}
			mid := (lo + hi) / 2
			mm, bb, err := med(mid)
			if err != nil {
				return 0, 0, 0, err
			}
			if mm >= 0 && mm <= target {
				lo, m, b = mid, mm, bb
			} else {
				hi = mid
			}
		}
		return lo, m, b, nil
	}
	rate, m, _, err := highest(contMedian)
	if err != nil {
		return Comparison{}, err
	}
	c.ContinuousRPS, c.ContinuousMedian = rate, msOf(m)
	rate, m, b, err := highest(staticMedian)
	if err != nil {
		return Comparison{}, err
	}
	c.StaticRPS, c.StaticMedian, c.StaticBatch = rate, msOf(m), b
	if c.StaticRPS > 0 {
		c.Ratio = c.ContinuousRPS / c.StaticRPS
	}
	return c, nil
}
