package reqstats

import (
	"context"
	"fmt"
	"sort"
	"time"

	"modelplane/busapi"
	"modelplane/judge"
)

// ExplorerLimit is how many requests of each kind Explore returns.
const ExplorerLimit = 20

// The bounds of the explorer cache the control plane gives its Reader
// (WithCache): the endpoint page polls every 5 s, so an answer is read
// again in the background once 10 s old, and none older than a minute is
// served.
const (
	ExplorerFresh  = 10 * time.Second
	ExplorerMaxAge = time.Minute
)

// Request is one notable request as the explorer lists it: its ids, the
// version and replica that served it, its status and how its time splits
// between the gateway (OverheadMS) and the replica (UpstreamMS).
type Request struct {
	At         time.Time `json:"at"`
	RequestID  string    `json:"request_id"`
	TraceID    string    `json:"trace_id"`
	Version    string    `json:"version"`
	Replica    string    `json:"replica"`
	Status     int       `json:"status"`
	LatencyMS  float64   `json:"latency_ms"`
	UpstreamMS float64   `json:"upstream_ms"`
	OverheadMS float64   `json:"overhead_ms"`
}

// Overhead is one version's gateway overhead over the window.
type Overhead struct {
	Version string `json:"version"`
	// Requests is how many requests reached a replica; P50MS and P99MS
	// the overhead's quantiles over them.
	Requests uint64  `json:"requests"`
	P50MS    float64 `json:"p50_ms"`
	P99MS    float64 `json:"p99_ms"`
}

// Explorer is what Explore returns: the window's slowest requests (slowest
// first), its failed and its sampled ones (newest first), and the
// overhead the gateways added, per version and for the whole endpoint.
type Explorer struct {
	From    time.Time `json:"from"`
	Slowest []Request `json:"slowest"`
	Failed  []Request `json:"failed"`
	Sampled []Request `json:"sampled"`
	// Overhead is per version, by name; All is the endpoint's.
	Overhead []Overhead `json:"overhead"`
	All      Overhead   `json:"all"`
}

// Explore reads the notable requests of endpoint over the last minutes
// (at most MaxMinutes) from request_stats: each gateway names, per window
// and version, its slowest request, its last sampled one and its first
// failures (busapi.ReqStats.Notable), so these are the slowest of the
// slowest and the failures a gateway named, not every one. A Reader
// WithCache answers from its cache, read at most the cache's MaxAge ago:
// From is then the window's start as of that read.
func (r *Reader) Explore(ctx context.Context, endpoint string, endpointID int64, minutes int) (Explorer, error) {
	if minutes <= 0 || minutes > MaxMinutes {
		return Explorer{}, fmt.Errorf("%w: %d minutes", ErrWindow, minutes)
	}
	if r.explorer == nil {
		return r.explore(ctx, endpoint, endpointID, minutes)
	}
	a, err := r.explorer.Get(ctx, explorerKey{endpoint, endpointID, minutes}, func(ctx context.Context) (Explorer, error) {
		return r.explore(ctx, endpoint, endpointID, minutes)
	})
	return a.Value, err
}

// explorerKey names one Explore answer.
type explorerKey struct {
	endpoint   string
	endpointID int64
	minutes    int
}

// explore reads what Explore returns.
func (r *Reader) explore(ctx context.Context, endpoint string, endpointID int64, minutes int) (Explorer, error) {
	from := r.clock.Now().Add(-time.Duration(minutes) * time.Minute)
	ctx, cancel := context.WithTimeout(ctx, queryTimeout)
	defer cancel()
	out := Explorer{From: from, Slowest: []Request{}, Failed: []Request{}, Sampled: []Request{}, Overhead: []Overhead{}}

	// The histograms are summed in ClickHouse, bucket by bucket, one row a
	// version: a busy endpoint has thousands of windows an hour, and
	// sending each window's array to be decoded here took most of the
	// control plane's CPU in bench pages. Arrays of another length (rows
	// older than the column) are left out, as addBuckets does.
	rows, err := r.ch.Query(ctx, `SELECT version, sumForEach(if(length(overhead_buckets) = ?, overhead_buckets, emptyArrayUInt64()))
		FROM request_stats WHERE endpoint = ? AND endpoint_id = ? AND window_start >= ? GROUP BY version`,
		busapi.LatencyBuckets, endpoint, endpointID, from.Add(-time.Second))
	if err != nil {
		return Explorer{}, fmt.Errorf("read overhead: %w", err)
	}
	sums := map[string][]uint64{}
	var all []uint64
	for rows.Next() {
		var version string
		var h []uint64
		if err := rows.Scan(&version, &h); err != nil {
			rows.Close()
			return Explorer{}, fmt.Errorf("read overhead: %w", err)
		}
		s := sums[version]
		addBuckets(&s, h)
		sums[version] = s
		addBuckets(&all, h)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return Explorer{}, fmt.Errorf("read overhead: %w", err)
	}
	for version, h := range sums {
		out.Overhead = append(out.Overhead, overheadOf(version, h))
	}
	sort.Slice(out.Overhead, func(i, j int) bool { return out.Overhead[i].Version < out.Overhead[j].Version })
	out.All = overheadOf("", all)

	// One scan reads all three kinds: ARRAY JOIN unrolls each row's
	// parallel arrays into one row per notable request (ClickHouse 18.16
	// and current versions alike), and LIMIT BY keeps each kind's first
	// ExplorerLimit in its own order: the slowest by latency, the failed and
	// sampled newest first. Three scans of the window timed out under load.
	rows, err = r.ch.Query(ctx, `SELECT kind, version, request_id, trace_id, replica, status, end_ms, latency, upstream
		FROM request_stats
		ARRAY JOIN notable_kind AS kind, notable_request_id AS request_id, notable_trace_id AS trace_id, notable_replica AS replica,
			notable_status AS status, notable_end_ms AS end_ms, notable_latency_ms AS latency, notable_upstream_ms AS upstream
		WHERE endpoint = ? AND endpoint_id = ? AND window_start >= ? AND kind IN (?, ?, ?) AND end_ms >= ?
		ORDER BY kind, if(kind = ?, latency, toFloat64(end_ms)) DESC
		LIMIT ? BY kind`, endpoint, endpointID, from.Add(-time.Second),
		busapi.NotableSlowest, busapi.NotableFailed, busapi.NotableSampled, from.UnixMilli(),
		busapi.NotableSlowest, ExplorerLimit)
	if err != nil {
		return Explorer{}, fmt.Errorf("read notable requests: %w", err)
	}
	defer rows.Close()
	into := map[string]*[]Request{busapi.NotableSlowest: &out.Slowest, busapi.NotableFailed: &out.Failed, busapi.NotableSampled: &out.Sampled}
	for rows.Next() {
		var q Request
		var kind string
		var status uint16
		var endMS int64
		if err := rows.Scan(&kind, &q.Version, &q.RequestID, &q.TraceID, &q.Replica, &status, &endMS, &q.LatencyMS, &q.UpstreamMS); err != nil {
			return Explorer{}, fmt.Errorf("read notable requests: %w", err)
		}
		q.Status, q.At = int(status), time.UnixMilli(endMS).UTC()
		if q.UpstreamMS > 0 {
			q.OverheadMS = max(q.LatencyMS-q.UpstreamMS, 0)
		}
		*into[kind] = append(*into[kind], q)
	}
	if err := rows.Err(); err != nil {
		return Explorer{}, fmt.Errorf("read notable requests: %w", err)
	}
	return out, nil
}

func overheadOf(version string, h []uint64) Overhead {
	o := Overhead{Version: version}
	for _, n := range h {
		o.Requests += n
	}
	if o.Requests > 0 {
		o.P50MS, o.P99MS = judge.QuantileMS(h, 0.5), judge.QuantileMS(h, 0.99)
	}
	return o
}
