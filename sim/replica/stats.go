package replica

import (
	"math"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/coder/quartz"
)

// Stats is a replica's state for the node agent's heartbeat and GET
// /v2/stats. Percentiles and the token rate cover the recent window
// (Config.StatsWindow); the counts are since Start.
type Stats struct {
	ReplicaID string `json:"replica_id"`
	Endpoint  string `json:"endpoint,omitempty"`
	Version   string `json:"version"`
	Task      Task   `json:"task"`
	Ready     bool   `json:"ready"`

	// QueueDepth counts chat requests waiting for a batch slot, preempted
	// ones included. Predict requests never queue: each waits its own
	// latency, so they count only in InFlight.
	QueueDepth int `json:"queue_depth"`
	// InFlight counts inference requests being answered.
	InFlight int `json:"in_flight"`
	// BatchSize is the number of sequences in the engine's batch.
	BatchSize     int     `json:"batch_size"`
	KVPagesUsed   int     `json:"kv_pages_used"`
	KVPagesTotal  int     `json:"kv_pages_total"`
	KVUtilization float64 `json:"kv_utilization"`
	// TokensPerSecond is generated tokens over the window (or since Start,
	// when that is shorter, but at least one second).
	TokensPerSecond float64 `json:"tokens_per_second"`
	// Tokens counts the tokens generated since Start and PromptTokens the
	// prompt tokens of the chat requests the engine took in: counters,
	// which the autoscaler's loop turns into rates over its own window.
	// Nil from a replica older than them (an adopted one).
	Tokens       *uint64 `json:"tokens,omitempty"`
	PromptTokens *uint64 `json:"prompt_tokens,omitempty"`
	// TTFT is from the request's arrival to its first token; TPOT is a
	// request's mean time per output token after the first,
	// (last - first) / (tokens - 1). Latency is predict's time from a parsed
	// request to its answer. Milliseconds; 0 without samples.
	TTFTP50Ms    float64 `json:"ttft_p50_ms"`
	TTFTP99Ms    float64 `json:"ttft_p99_ms"`
	TPOTP50Ms    float64 `json:"tpot_p50_ms"`
	TPOTP99Ms    float64 `json:"tpot_p99_ms"`
	LatencyP50Ms float64 `json:"latency_p50_ms"`
	LatencyP99Ms float64 `json:"latency_p99_ms"`
	// Requests counts inference requests answered, whatever the outcome;
	// Errors those answered 5xx or failed mid-stream; Cancelled the
	// generations cancelled because the client left or stalled.
	Requests      uint64  `json:"requests"`
	Errors        uint64  `json:"errors"`
	Cancelled     uint64  `json:"cancelled"`
	WindowSeconds float64 `json:"window_seconds"`
}

// Stats returns the replica's current statistics.
func (s *Server) Stats() Stats {
	st := s.stats.snapshot()
	st.ReplicaID, st.Endpoint, st.Version, st.Task = s.cfg.ReplicaID, s.cfg.Endpoint, s.cfg.Version, s.cfg.Task
	st.Ready = s.Ready()
	st.InFlight = int(s.inFlight.Load())
	if s.cfg.Task == TaskLLM {
		st.QueueDepth += s.inbox.waiting()
	}
	return st
}

func (s *Server) serveStats(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, s.Stats())
}

// samplesKept bounds each percentile's memory; beyond it the oldest samples
// drop out before the window does.
const samplesKept = 4096

// recorder collects the windowed measurements. It is shared by handlers and
// the step loop.
type recorder struct {
	clock  quartz.Clock
	window time.Duration

	mu        sync.Mutex
	started   time.Time
	eng       EngineStats
	ttft      ring
	tpot      ring
	latency   ring
	perSecond []bucket
	requests  uint64
	errors    uint64
	cancels   uint64
	// generated and prompted count tokens since start (Stats.Tokens,
	// Stats.PromptTokens).
	generated, prompted uint64
}

type bucket struct {
	sec int64
	n   float64
}

func newRecorder(c quartz.Clock, window time.Duration) *recorder {
	secs := int(math.Ceil(window.Seconds()))
	return &recorder{clock: c, window: window, started: c.Now(), perSecond: make([]bucket, max(secs, 1)+1)}
}

func (r *recorder) start() {
	r.mu.Lock()
	r.started = r.clock.Now()
	r.mu.Unlock()
}

func (r *recorder) request(status int) {
	r.mu.Lock()
	r.requests++
	if status >= 500 {
		r.errors++
	}
	r.mu.Unlock()
}

func (r *recorder) failedAfterHeaders() {
	r.mu.Lock()
	r.errors++
	r.mu.Unlock()
}

func (r *recorder) cancelled() {
	r.mu.Lock()
	r.cancels++
	r.mu.Unlock()
}

func (r *recorder) engine(e EngineStats) {
	r.mu.Lock()
	r.eng = e
	r.mu.Unlock()
}

func (r *recorder) engineStats() EngineStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.eng
}

func (r *recorder) ttftSample(d time.Duration)    { r.add(&r.ttft, d) }
func (r *recorder) tpotSample(d time.Duration)    { r.add(&r.tpot, d) }
func (r *recorder) latencySample(d time.Duration) { r.add(&r.latency, d) }

func (r *recorder) add(ring *ring, d time.Duration) {
	now := r.clock.Now()
	r.mu.Lock()
	ring.add(now, float64(d)/float64(time.Millisecond))
	r.mu.Unlock()
}

// tokens adds n generated tokens at time at.
func (r *recorder) tokens(at time.Time, n int) {
	if n == 0 {
		return
	}
	sec := at.Unix()
	r.mu.Lock()
	b := &r.perSecond[int(sec%int64(len(r.perSecond)))]
	if b.sec != sec {
		*b = bucket{sec: sec}
	}
	b.n += float64(n)
	r.generated += uint64(n)
	r.mu.Unlock()
}

// prompt adds the n prompt tokens of a sequence the engine took in.
func (r *recorder) prompt(n int) {
	r.mu.Lock()
	r.prompted += uint64(n)
	r.mu.Unlock()
}

func (r *recorder) snapshot() Stats {
	now := r.clock.Now()
	since := now.Add(-r.window)
	r.mu.Lock()
	defer r.mu.Unlock()
	st := Stats{
		QueueDepth:    r.eng.Waiting,
		BatchSize:     r.eng.Running,
		KVPagesUsed:   r.eng.KVPagesUsed,
		KVPagesTotal:  r.eng.KVPagesTotal,
		Requests:      r.requests,
		Errors:        r.errors,
		Cancelled:     r.cancels,
		WindowSeconds: r.window.Seconds(),
	}
	// Copies: the recorder's own fields change under its lock.
	generated, prompted := r.generated, r.prompted
	st.Tokens, st.PromptTokens = &generated, &prompted
	if r.eng.KVPagesTotal > 0 {
		st.KVUtilization = float64(r.eng.KVPagesUsed) / float64(r.eng.KVPagesTotal)
	}
	st.TTFTP50Ms, st.TTFTP99Ms = r.ttft.percentiles(since)
	st.TPOTP50Ms, st.TPOTP99Ms = r.tpot.percentiles(since)
	st.LatencyP50Ms, st.LatencyP99Ms = r.latency.percentiles(since)

	nowSec := now.Unix()
	first := nowSec - int64(len(r.perSecond)-1) // buckets older than the window
	var total float64
	for _, b := range r.perSecond {
		if b.sec > first && b.sec <= nowSec {
			total += b.n
		}
	}
	span := min(now.Sub(r.started), r.window).Seconds()
	st.TokensPerSecond = total / max(span, 1)
	return st
}

// ring keeps the latest samplesKept samples.
type ring struct {
	at   []time.Time
	v    []float64
	next int
}

func (g *ring) add(at time.Time, v float64) {
	if len(g.v) < samplesKept {
		g.at = append(g.at, at)
		g.v = append(g.v, v)
		return
	}
	g.at[g.next], g.v[g.next] = at, v
	g.next = (g.next + 1) % samplesKept
}

// percentiles returns the nearest-rank p50 and p99 of the samples after
// since.
func (g *ring) percentiles(since time.Time) (p50, p99 float64) {
	var vs []float64
	for i, at := range g.at {
		if at.After(since) {
			vs = append(vs, g.v[i])
		}
	}
	if len(vs) == 0 {
		return 0, 0
	}
	slices.Sort(vs)
	return rank(vs, 0.50), rank(vs, 0.99)
}

// rank is the nearest-rank percentile of sorted values.
func rank(sorted []float64, p float64) float64 {
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}
