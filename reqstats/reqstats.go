package reqstats

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/coder/quartz"

	"modelplane/busapi"
	"modelplane/judge"
	"modelplane/readcache"
)

// queryTimeout bounds one read; the portal polls every few seconds, so a
// slow ClickHouse must not pile requests up.
const queryTimeout = 5 * time.Second

// ErrWindow is returned for a window the reader refuses: not positive, or
// more steps than a chart can show.
var ErrWindow = errors.New("traffic: bad window")

// MaxSteps is the most points one series may have.
const MaxSteps = 360

// Reader reads request_stats and its pre-aggregates (ClickHouse migration
// 0013): request_stats_minutely for whole minutes, request_stats_hourly for
// whole hours, the raw windows only for what is finer than a minute (the
// 10-second steps of the last ten minutes, the judge's partial minutes).
type Reader struct {
	ch    driver.Conn
	clock quartz.Clock
	// raw reads every figure from the raw windows (RawOnly).
	raw bool
	// explorer keeps Explore's answers (WithCache); nil reads every time.
	explorer *readcache.Cache[explorerKey, Explorer]
}

// NewReader returns a Reader over ch; clock is what ends every window
// (quartz.NewReal() when nil).
func NewReader(ch driver.Conn, clock quartz.Clock) *Reader {
	if clock == nil {
		clock = quartz.NewReal()
	}
	return &Reader{ch: ch, clock: clock}
}

// RawOnly returns a copy of r that reads every figure from the raw
// windows and caches nothing: what the pre-aggregates are checked against
// and what the benchmark measures them beside.
func (r *Reader) RawOnly() *Reader {
	c := *r
	c.raw, c.explorer = true, nil
	return &c
}

// WithCache returns a copy of r whose Explore answers come from a cache
// bounded by opts (its clock r's): the explorer lists notable requests
// that no pre-aggregate holds, and the endpoint page polls it every 5 s.
func (r *Reader) WithCache(opts readcache.Options) *Reader {
	c := *r
	opts.Clock = r.clock
	c.explorer = readcache.New[explorerKey, Explorer](opts)
	return &c
}

// Point is one step of one version's series. Latencies are in
// milliseconds; a quantile of a step without samples is zero and Requests
// tells it apart.
type Point struct {
	Start     time.Time `json:"start"`
	Requests  uint64    `json:"requests"`
	QPS       float64   `json:"qps"`
	Errors    uint64    `json:"errors"`
	ErrorRate float64   `json:"error_rate"`
	P50MS     float64   `json:"p50_ms"`
	P99MS     float64   `json:"p99_ms"`
	Streams   uint64    `json:"streams"`
	TTFTP50MS float64   `json:"ttft_p50_ms"`
	TTFTP99MS float64   `json:"ttft_p99_ms"`
	TPOTP50MS float64   `json:"tpot_p50_ms"`
	TPOTP99MS float64   `json:"tpot_p99_ms"`
}

// Series is one version's points, oldest first, one per step of the window
// (steps without traffic included, as zeros).
type Series struct {
	Version string  `json:"version"`
	Points  []Point `json:"points"`
	// Streaming is true when any window of the version counted a stream,
	// so the caller shows TTFT and TPOT.
	Streaming bool `json:"streaming"`
}

// Window is what Read returns: the series of every version with traffic,
// by version name.
type Window struct {
	From     time.Time     `json:"from"`
	Step     time.Duration `json:"step"`
	Versions []Series      `json:"versions"`
}

// Read returns the series of endpoint over the steps × step ending now,
// aligned to step. Only rows of the endpoint's id count: an endpoint
// deleted and created again under the same name (perhaps by another team)
// never shows the old one's statistics, even before retention purges them. Errors counted are upstream, timeout and shed failures
// (a client's bad request is not the endpoint's error); the rate divides
// them by requests.
func (r *Reader) Read(ctx context.Context, endpoint string, endpointID int64, steps int, step time.Duration) (Window, error) {
	if steps <= 0 || steps > MaxSteps || step < time.Second {
		return Window{}, fmt.Errorf("%w: %d steps of %s", ErrWindow, steps, step)
	}
	end := r.clock.Now().Truncate(step).Add(step)
	from := end.Add(-time.Duration(steps) * step)
	ctx, cancel := context.WithTimeout(ctx, queryTimeout)
	defer cancel()
	// Steps of whole minutes start on whole minutes (the window ends on a
	// step), so the minute pre-aggregate holds them exactly.
	q, args := `SELECT version, toUnixTimestamp(window_start), window_start_ms, requests,
		errors_upstream + errors_timeout + errors_shed, latency_buckets, streams, ttft_buckets, tpot_buckets
		FROM request_stats WHERE endpoint = ? AND endpoint_id = ? AND window_start >= ? AND window_start < ?`,
		[]any{endpoint, endpointID, from.Add(-time.Second), end.Add(time.Second)}
	if !r.raw && step%time.Minute == 0 {
		q, args = `SELECT version, toUnixTimestamp(minute), toUInt16(0), sumMerge(requests), sumMerge(errors),
			sumForEachMerge(latency_buckets), sumMerge(streams), sumForEachMerge(ttft_buckets), sumForEachMerge(tpot_buckets)
			FROM request_stats_minutely WHERE endpoint = ? AND endpoint_id = ? AND minute >= ? AND minute < ?
			GROUP BY version, minute`, []any{endpoint, endpointID, from, end}
	}
	rows, err := r.ch.Query(ctx, q, args...)
	if err != nil {
		return Window{}, fmt.Errorf("read traffic: %w", err)
	}
	defer rows.Close()
	acc := map[string]*versionAcc{}
	for rows.Next() {
		var (
			version                 string
			sec                     uint32
			ms                      uint16
			requests, errs, streams uint64
			lat, ttft, tpot         []uint64
		)
		if err := rows.Scan(&version, &sec, &ms, &requests, &errs, &lat, &streams, &ttft, &tpot); err != nil {
			return Window{}, fmt.Errorf("read traffic: %w", err)
		}
		at := time.Unix(int64(sec), int64(ms)*int64(time.Millisecond))
		if at.Before(from) || !at.Before(end) {
			continue
		}
		a := acc[version]
		if a == nil {
			a = newVersionAcc(steps)
			acc[version] = a
		}
		s := &a.steps[int(at.Sub(from)/step)]
		s.requests += requests
		s.errors += errs
		s.streams += streams
		addBuckets(&s.lat, lat)
		addBuckets(&s.ttft, ttft)
		addBuckets(&s.tpot, tpot)
		if streams > 0 {
			a.streaming = true
		}
	}
	if err := rows.Err(); err != nil {
		return Window{}, fmt.Errorf("read traffic: %w", err)
	}
	w := Window{From: from, Step: step}
	for version, a := range acc {
		s := Series{Version: version, Streaming: a.streaming, Points: make([]Point, steps)}
		for i, st := range a.steps {
			p := Point{Start: from.Add(time.Duration(i) * step), Requests: st.requests, Errors: st.errors,
				QPS: float64(st.requests) / step.Seconds(), Streams: st.streams,
				P50MS: judge.QuantileMS(st.lat, 0.5), P99MS: judge.QuantileMS(st.lat, 0.99)}
			if st.requests > 0 {
				p.ErrorRate = float64(st.errors) / float64(st.requests)
			}
			if a.streaming {
				p.TTFTP50MS, p.TTFTP99MS = judge.QuantileMS(st.ttft, 0.5), judge.QuantileMS(st.ttft, 0.99)
				p.TPOTP50MS, p.TPOTP99MS = judge.QuantileMS(st.tpot, 0.5), judge.QuantileMS(st.tpot, 0.99)
			}
			s.Points[i] = p
		}
		w.Versions = append(w.Versions, s)
	}
	sort.Slice(w.Versions, func(i, j int) bool { return w.Versions[i].Version < w.Versions[j].Version })
	return w, nil
}

type stepAcc struct {
	requests, errors, streams uint64
	lat, ttft, tpot           []uint64
}

type versionAcc struct {
	steps     []stepAcc
	streaming bool
}

func newVersionAcc(steps int) *versionAcc { return &versionAcc{steps: make([]stepAcc, steps)} }

// addBuckets adds h into *sum; a histogram of the wrong length (an empty
// one for a version that does not stream) is skipped.
func addBuckets(sum *[]uint64, h []uint64) {
	if len(h) != busapi.LatencyBuckets {
		return
	}
	if *sum == nil {
		*sum = make([]uint64, busapi.LatencyBuckets)
	}
	for i, n := range h {
		(*sum)[i] += n
	}
}

// MaxMinutes is the longest window Last reads.
const MaxMinutes = MaxSteps

// Last reads the last minutes of endpoint: in 10-second steps up to ten
// minutes, so a live chart moves, and in one-minute steps beyond, so a
// chart never has more than MaxSteps points.
func (r *Reader) Last(ctx context.Context, endpoint string, endpointID int64, minutes int) (Window, error) {
	if minutes <= 0 || minutes > MaxMinutes {
		return Window{}, fmt.Errorf("%w: %d minutes", ErrWindow, minutes)
	}
	if minutes <= 10 {
		return r.Read(ctx, endpoint, endpointID, minutes*6, 10*time.Second)
	}
	return r.Read(ctx, endpoint, endpointID, minutes, time.Minute)
}

// Totals sums each version's request statistics of endpoint over windows
// starting in [from, to): what a rollout's judge compares. Errors are
// upstream, timeout and shed failures, as Read counts them; histograms are
// over busapi.LatencyBoundsUS (nil when the version recorded none). Pinned
// requests do not count. Whole minutes come from the minute pre-aggregate,
// the partial minutes at either end from the raw windows, so the sums are
// those of the raw windows exactly.
func (r *Reader) Totals(ctx context.Context, endpoint string, endpointID int64, from, to time.Time) (map[string]judge.Window, error) {
	if !from.Before(to) {
		return nil, fmt.Errorf("%w: from %s is not before to %s", ErrWindow, from, to)
	}
	ctx, cancel := context.WithTimeout(ctx, queryTimeout)
	defer cancel()
	m0, m1 := from.Truncate(time.Minute), to.Truncate(time.Minute)
	if m0.Before(from) {
		m0 = m0.Add(time.Minute)
	}
	out := map[string]judge.Window{}
	if r.raw || !m0.Before(m1) {
		return out, r.rawTotals(ctx, out, endpoint, endpointID, from, to)
	}
	for _, edge := range [][2]time.Time{{from, m0}, {m1, to}} {
		if edge[0].Before(edge[1]) {
			if err := r.rawTotals(ctx, out, endpoint, endpointID, edge[0], edge[1]); err != nil {
				return nil, err
			}
		}
	}
	rows, err := r.ch.Query(ctx, `SELECT version, sumMerge(requests), sumMerge(errors), sumForEachMerge(latency_buckets),
		sumMerge(streams), sumForEachMerge(tpot_buckets)
		FROM request_stats_minutely WHERE endpoint = ? AND endpoint_id = ? AND pinned = 0 AND minute >= ? AND minute < ?
		GROUP BY version`, endpoint, endpointID, m0, m1)
	if err != nil {
		return nil, fmt.Errorf("read totals: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			version                 string
			requests, errs, streams uint64
			lat, tpot               []uint64
		)
		if err := rows.Scan(&version, &requests, &errs, &lat, &streams, &tpot); err != nil {
			return nil, fmt.Errorf("read totals: %w", err)
		}
		out[version] = addWindow(out[version], requests, errs, streams, lat, tpot)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read totals: %w", err)
	}
	return out, nil
}

// Through is the end of the newest unpinned statistics window of endpoint
// in ClickHouse that started at or after since; the zero time when there is
// none. A window reaches ClickHouse a flush interval and an ingest after it
// starts, so a judge that reads up to now reads a tail that has not arrived:
// it reads up to Through instead.
func (r *Reader) Through(ctx context.Context, endpoint string, endpointID int64, since time.Time) (time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, queryTimeout)
	defer cancel()
	var (
		ms uint64
		n  uint64
	)
	if err := r.ch.QueryRow(ctx, `SELECT max(toUInt64(toUnixTimestamp(window_end)) * 1000 + window_end_ms), count()
		FROM request_stats WHERE endpoint = ? AND endpoint_id = ? AND pinned = 0 AND window_start >= ?`,
		endpoint, endpointID, since.Truncate(time.Second)).Scan(&ms, &n); err != nil {
		return time.Time{}, fmt.Errorf("read newest statistics: %w", err)
	}
	if n == 0 {
		return time.Time{}, nil
	}
	return time.UnixMilli(int64(ms)), nil
}

// addWindow adds one set of sums to w.
func addWindow(w judge.Window, requests, errs, streams uint64, lat, tpot []uint64) judge.Window {
	w.Requests += requests
	w.Errors += errs
	w.Streams += streams
	addBuckets(&w.Latency, lat)
	addBuckets(&w.TPOT, tpot)
	return w
}

// rawTotals adds the raw windows of endpoint starting in [from, to) to out.
func (r *Reader) rawTotals(ctx context.Context, out map[string]judge.Window, endpoint string, endpointID int64, from, to time.Time) error {
	rows, err := r.ch.Query(ctx, `SELECT version, toUnixTimestamp(window_start), window_start_ms, requests,
		errors_upstream + errors_timeout + errors_shed, latency_buckets, streams, tpot_buckets
		FROM request_stats WHERE endpoint = ? AND endpoint_id = ? AND window_start >= ? AND window_start < ? AND pinned = 0`,
		endpoint, endpointID, from.Add(-time.Second), to.Add(time.Second))
	if err != nil {
		return fmt.Errorf("read totals: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			version                 string
			sec                     uint32
			ms                      uint16
			requests, errs, streams uint64
			lat, tpot               []uint64
		)
		if err := rows.Scan(&version, &sec, &ms, &requests, &errs, &lat, &streams, &tpot); err != nil {
			return fmt.Errorf("read totals: %w", err)
		}
		at := time.Unix(int64(sec), int64(ms)*int64(time.Millisecond))
		if at.Before(from) || !at.Before(to) {
			continue
		}
		out[version] = addWindow(out[version], requests, errs, streams, lat, tpot)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read totals: %w", err)
	}
	return nil
}
