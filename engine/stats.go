package engine

import (
	"slices"
	"time"
)

// Percentiles summarises latency samples by nearest rank.
type Percentiles struct {
	N   int           `json:"n"`
	P50 time.Duration `json:"p50"`
	P90 time.Duration `json:"p90"`
	P99 time.Duration `json:"p99"`
	Max time.Duration `json:"max"`
}

// PercentilesOf returns the nearest-rank percentiles of samples (the value
// at rank ceil(p × n)); zero without samples. samples is not modified.
func PercentilesOf(samples []time.Duration) Percentiles {
	if len(samples) == 0 {
		return Percentiles{}
	}
	s := slices.Clone(samples)
	slices.Sort(s)
	rank := func(pct int) time.Duration {
		i := (pct*len(s)+99)/100 - 1 // ceil(pct/100 × n), in integers
		return s[max(0, min(i, len(s)-1))]
	}
	return Percentiles{N: len(s), P50: rank(50), P90: rank(90), P99: rank(99), Max: s[len(s)-1]}
}

// Stats is a snapshot of a Scheduler for a replica's heartbeat: occupancy
// now, and rates and latencies over the recent past, all in model time.
type Stats struct {
	// Now is the time the snapshot was asked for.
	Now time.Duration
	// Waiting is the queue depth, preempted sequences included.
	Waiting int
	// Running is the batch size: sequences admitted, prefilling or decoding.
	Running int
	// KVPagesTotal is the cache size; KVPagesUsed the distinct pages
	// requests hold; KVPagesCached the prefix pages nobody holds, kept
	// cached and evictable (Config.PrefixCaching); KVPagesReserved the
	// available pages held back for running sequences' growth (see
	// Reserve).
	KVPagesTotal    int
	KVPagesUsed     int
	KVPagesCached   int
	KVPagesReserved int
	// KVUtilization is KVPagesUsed / KVPagesTotal: cached pages, which
	// are evicted when needed, do not count, as in vLLM's
	// kv_cache_usage_perc.
	KVUtilization float64
	// TokensPerSecond is completion tokens generated in the last
	// StatsWindow of model time (or since the first step, when shorter).
	TokensPerSecond float64
	// TTFT (arrival to first token) and TPOT (a request's mean time per
	// output token after the first) over the last StatsSamples finished
	// requests.
	TTFT Percentiles
	TPOT Percentiles
	// Counts since the scheduler was made.
	Submitted           int64
	Completed           int64
	Cancelled           int64
	PriorityPreemptions int64
	GrowthPreemptions   int64
	// GrowFailures counts running sequences that found no page to grow
	// into and were preempted for it. Admission reserves against this, so
	// it is always 0 unless the scheduler has a bug; tests assert it.
	GrowFailures int64
	// PrefixQueries are the tokens admissions looked up in the prefix
	// pages (each admission's prompt and output so far) and PrefixHits
	// those found computed there, as vLLM's prefix_cache_queries and
	// prefix_cache_hits; 0 without prefixes or caching.
	PrefixQueries int64
	PrefixHits    int64
}

// StatsWindow is the span of model time TokensPerSecond covers, and
// StatsSamples the number of recent requests the percentiles cover.
const (
	StatsWindow  = 10 * time.Second
	StatsSamples = 1024
)

// recorder keeps the recent samples behind Stats.
type recorder struct {
	ttft, tpot ring
	// steps are (end, tokens) of recent steps, oldest first, from head.
	steps []stepTokens
	head  int
	first time.Duration
	begun bool
}

type stepTokens struct {
	end    time.Duration
	tokens int
}

func (r *recorder) step(start, end time.Duration, tokens int) {
	if !r.begun {
		r.first, r.begun = start, true
	}
	r.steps = append(r.steps, stepTokens{end: end, tokens: tokens})
	r.trim(end)
}

// trim drops the steps that ended before the window, compacting now and
// then so the slice does not grow without bound.
func (r *recorder) trim(now time.Duration) {
	for r.head < len(r.steps) && r.steps[r.head].end <= now-StatsWindow {
		r.head++
	}
	if r.head > 1024 && r.head*2 > len(r.steps) {
		r.steps = append(r.steps[:0], r.steps[r.head:]...)
		r.head = 0
	}
}

func (r *recorder) tokensPerSecond(now time.Duration) float64 {
	if !r.begun || now <= r.first {
		return 0
	}
	n := 0
	for _, s := range r.steps[r.head:] {
		if s.end > now-StatsWindow && s.end <= now {
			n += s.tokens
		}
	}
	span := min(now-r.first, StatsWindow)
	return float64(n) / span.Seconds()
}

// ring keeps the latest StatsSamples durations.
type ring struct {
	v    []time.Duration
	next int
}

func (g *ring) add(d time.Duration) {
	if len(g.v) < StatsSamples {
		g.v = append(g.v, d)
		return
	}
	g.v[g.next] = d
	g.next = (g.next + 1) % StatsSamples
}
