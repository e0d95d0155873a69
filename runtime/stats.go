package runtime

import (
	"slices"
	"sync"
	"time"
)

// latencyWindow is how many recent request latencies /v2/stats reads its
// percentiles from.
const latencyWindow = 1024

// stats keeps what /v2/stats reports beyond the batcher's state: request
// and error counts and recent latencies.
type stats struct {
	mu        sync.Mutex
	requests  uint64
	errors    uint64
	cancelled uint64
	lat       []float64 // ring of milliseconds
	next      int
}

func newStats() *stats { return &stats{lat: make([]float64, 0, latencyWindow)} }

// request records one answered inference request.
func (s *stats) request(status int, d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests++
	switch {
	case status == statusClientGone:
		s.cancelled++
	case status >= 500:
		s.errors++
	}
	if status == 200 {
		ms := float64(d) / float64(time.Millisecond)
		if len(s.lat) < latencyWindow {
			s.lat = append(s.lat, ms)
		} else {
			s.lat[s.next] = ms
			s.next = (s.next + 1) % latencyWindow
		}
	}
}

// snapshot returns the counts and the p50 and p99 of recent latencies.
func (s *stats) snapshot() (requests, errors, cancelled uint64, p50, p99 float64) {
	s.mu.Lock()
	lat := slices.Clone(s.lat)
	requests, errors, cancelled = s.requests, s.errors, s.cancelled
	s.mu.Unlock()
	if len(lat) == 0 {
		return requests, errors, cancelled, 0, 0
	}
	slices.Sort(lat)
	at := func(q float64) float64 { return lat[min(len(lat)-1, int(q*float64(len(lat))))] }
	return requests, errors, cancelled, at(0.50), at(0.99)
}

// replicaStats is GET /v2/stats: the fields of the simulated replica's
// statistics (sim/replica.Stats) that a predictor fills, so the agent
// observes a built-in runtime as it observes a simulated one.
type replicaStats struct {
	ReplicaID    string  `json:"replica_id"`
	Endpoint     string  `json:"endpoint,omitempty"`
	Version      string  `json:"version"`
	Task         string  `json:"task"`
	Ready        bool    `json:"ready"`
	QueueDepth   int     `json:"queue_depth"`
	InFlight     int     `json:"in_flight"`
	BatchSize    int     `json:"batch_size"`
	LatencyP50Ms float64 `json:"latency_p50_ms"`
	LatencyP99Ms float64 `json:"latency_p99_ms"`
	Requests     uint64  `json:"requests"`
	Errors       uint64  `json:"errors"`
	Cancelled    uint64  `json:"cancelled"`
}
