package fleet

import (
	"fmt"
	"math"

	"modelplane/busapi"
)

// Bounds of what a heartbeat may claim of one replica: far beyond any real
// runtime, they keep a broken or hostile agent from storing nonsense.
const (
	maxReplicaCount = 10_000_000
	maxReplicaMS    = 7 * 24 * 3600 * 1000
)

// checkReplicaMetrics refuses a replica report whose numbers no runtime
// produces: negative, out of range, or not finite.
func checkReplicaMetrics(r busapi.ReplicaStatus) error {
	counts := []struct {
		name string
		v    int64
		max  int64
	}{
		{"queue_depth", int64(r.QueueDepth), maxReplicaCount},
		{"in_flight", int64(r.InFlight), maxReplicaCount},
		{"requests", r.Requests, math.MaxInt64},
		{"download_ms", r.DownloadMS, maxReplicaMS},
		{"verify_ms", r.VerifyMS, maxReplicaMS},
		{"load_ms", r.LoadMS, maxReplicaMS},
		{"warmup_ms", r.WarmupMS, maxReplicaMS},
		{"tokens", deref(r.Tokens), math.MaxInt64},
		{"prompt_tokens", deref(r.PromptTokens), math.MaxInt64},
	}
	for _, c := range counts {
		if c.v < 0 || c.v > c.max {
			return fmt.Errorf("%s %d out of 0..%d", c.name, c.v, c.max)
		}
	}
	reals := []struct {
		name string
		v    float64
		max  float64
	}{
		{"batch_size", r.BatchSize, maxReplicaCount},
		{"kv_used_pct", r.KVUsedPct, 100},
		{"tokens_per_second", r.TokensPerSecond, 1e9},
		{"ttft_ms", r.TTFTMS, maxReplicaMS},
		{"batch_queue_ms", r.BatchQueueMS, maxReplicaMS},
		{"gpu_util", r.GPUUtil, 1},
	}
	for _, c := range reals {
		if math.IsNaN(c.v) || c.v < 0 || c.v > c.max {
			return fmt.Errorf("%s %v out of 0..%v", c.name, c.v, c.max)
		}
	}
	if len(r.Absent) > 4*len(busapi.Metrics) {
		return fmt.Errorf("%d absent metrics, more than any runtime has", len(r.Absent))
	}
	return nil
}

// deref is a counter's value, 0 for none.
func deref(n *int64) int64 {
	if n == nil {
		return 0
	}
	return *n
}

// checkCache refuses a cache report that cannot be true.
func checkCache(c *busapi.CacheStatus) error {
	if c == nil {
		return nil
	}
	if c.BytesUsed < 0 || c.BytesLimit < 0 || c.Versions < 0 || c.Versions > maxReplicaCount {
		return fmt.Errorf("cache bytes_used %d, bytes_limit %d, versions %d: want none negative", c.BytesUsed, c.BytesLimit, c.Versions)
	}
	return nil
}
