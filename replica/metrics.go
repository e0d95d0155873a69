package replica

import (
	"encoding/json"
	"slices"
	"time"

	"modelplane/busapi"
)

// Metrics is a replica's load and cold start as its node's latest
// heartbeat reported them (replicas.metrics). The autoscaler reads the load;
// people read both on the fleet's node page and with the endpoint's
// replicas. A field the replica's runtime does not report is zero and
// named in Absent: missing, never a measured 0.
type Metrics struct {
	// QueueDepth counts requests waiting to execute; InFlight those
	// received and not yet answered, queued ones included.
	QueueDepth int `json:"queue_depth"`
	InFlight   int `json:"in_flight"`
	// BatchSize is the runtime's batch: the mean executed batch of a
	// batching predictor, the sequences in an LLM engine's batch.
	BatchSize float64 `json:"batch_size"`
	// KVUsedPct is the share of KV-cache in use, 0–100 (LLM replicas).
	KVUsedPct float64 `json:"kv_used_pct"`
	// Requests counts requests answered since the replica started.
	Requests int64 `json:"requests"`
	// TokensPerSecond and TTFTMS are an LLM replica's generation rate and
	// time to first token over the last few seconds.
	TokensPerSecond float64 `json:"tokens_per_second"`
	TTFTMS          float64 `json:"ttft_ms"`
	// Tokens and PromptTokens count an LLM replica's generated tokens and
	// the prompt tokens it took in since it started: the autoscaler's
	// loop measures their rates over its rate window.
	Tokens       int64 `json:"tokens,omitempty"`
	PromptTokens int64 `json:"prompt_tokens,omitempty"`
	// BatchQueueMS is the mean wait in the runtime's batcher, GPUUtil the
	// replica's GPU utilisation (0 to 1), as the agent reported them.
	BatchQueueMS float64 `json:"batch_queue_ms"`
	GPUUtil      float64 `json:"gpu_util"`
	// RPS is the replica's requests per second between its last two
	// heartbeats: Requests' growth over ObservedAtMS's, computed where
	// the heartbeat is stored (0 after the first, or after the runtime
	// restarted and its counter began again). ObservedAtMS is when the
	// control plane recorded the heartbeat, in Unix milliseconds.
	RPS          float64 `json:"rps"`
	ObservedAtMS int64   `json:"observed_at_ms"`
	// ColdStart is how long the replica took to become ready.
	ColdStart ColdStart `json:"cold_start"`
	// Absent names, by their JSON names, the fields above the replica's
	// runtime does not report (busapi.ReplicaStatus.Absent), and "rps" when
	// the requests counter was absent from this heartbeat or the one
	// before, so that no rate is made of it. Runtime is the catalogue
	// entry running the replica, empty for a simulated one.
	Absent  []string `json:"absent,omitempty"`
	Runtime string   `json:"runtime,omitempty"`
}

// MetricRPS names RPS in Metrics.Absent.
const MetricRPS = "rps"

// Reports says whether the replica's runtime reported the field named (a
// busapi.Metric* constant or MetricRPS).
func (m Metrics) Reports(field string) bool { return !slices.Contains(m.Absent, field) }

// maxRuntimeName bounds the runtime name a heartbeat may store.
const maxRuntimeName = 64

// ColdStart is a replica's start split into its parts, in milliseconds:
// fetching the version's files that were not cached (0 on a cache hit),
// verifying their digests, the runtime's model load and its warm-up. 0 is
// none or not yet known.
type ColdStart struct {
	DownloadMS int64 `json:"download_ms"`
	VerifyMS   int64 `json:"verify_ms"`
	LoadMS     int64 `json:"load_ms"`
	WarmupMS   int64 `json:"warmup_ms"`
}

// TotalMS is the whole cold start.
func (c ColdStart) TotalMS() int64 { return c.DownloadMS + c.VerifyMS + c.LoadMS + c.WarmupMS }

// FromStatus is what the control plane stores of one replica report of a
// heartbeat it recorded at now.
func FromStatus(r busapi.ReplicaStatus, now time.Time) Metrics {
	m := Metrics{QueueDepth: r.QueueDepth, InFlight: r.InFlight, BatchSize: r.BatchSize, KVUsedPct: r.KVUsedPct,
		Requests: r.Requests, TokensPerSecond: r.TokensPerSecond, TTFTMS: r.TTFTMS,
		BatchQueueMS: r.BatchQueueMS, GPUUtil: r.GPUUtil, ObservedAtMS: now.UnixMilli(),
		ColdStart: ColdStart{DownloadMS: r.DownloadMS, VerifyMS: r.VerifyMS, LoadMS: r.LoadMS, WarmupMS: r.WarmupMS},
		Runtime:   truncate(r.Runtime, maxRuntimeName)}
	if r.Tokens != nil {
		m.Tokens = *r.Tokens
	}
	if r.PromptTokens != nil {
		m.PromptTokens = *r.PromptTokens
	}
	// The names this control plane knows, in their order, once each: a
	// newer agent's other names mean nothing to it.
	for _, f := range busapi.Metrics {
		if !r.Reports(f) {
			m.Absent = append(m.Absent, f)
		}
	}
	if !r.Reports(busapi.MetricRequests) {
		m.Absent = append(m.Absent, MetricRPS)
	}
	return m
}

// ParseMetrics reads a stored replicas.metrics value; a row written
// before heartbeats carried metrics reads as zero.
func ParseMetrics(raw []byte) Metrics {
	var m Metrics
	_ = json.Unmarshal(raw, &m)
	return m
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
