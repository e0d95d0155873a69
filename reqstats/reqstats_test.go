package reqstats_test

import (
	"context"
	"errors"
	"math"
	"os"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/coder/quartz"

	"modelplane/busapi"
	"modelplane/internal/chtest"
	"modelplane/reqstats"
)

func TestMain(m *testing.M) {
	code := m.Run()
	chtest.Stop()
	os.Exit(code)
}

// row is one gateway window of request_stats.
type row struct {
	at                      time.Time
	endpoint, version       string
	requests, errs, streams uint64
	lat, ttft, tpot         []uint64
	// pinned: the window's requests named their version (not the split's).
	pinned bool
}

func insert(t *testing.T, ch driver.Conn, rows ...row) {
	t.Helper()
	ctx := context.Background()
	batch, err := ch.PrepareBatch(ctx, "INSERT INTO request_stats (window_start, window_start_ms, window_end, window_end_ms, "+
		"gateway, endpoint, team, version, requests, errors_client, errors_upstream, errors_timeout, errors_shed, canceled, "+
		"latency_buckets, latency_sum_ms, streams, ttft_buckets, ttft_sum_ms, tpot_buckets, tpot_sum_ms, tokens, msg_id, stream_seq, pinned)")
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range rows {
		end := r.at.Add(5 * time.Second)
		if r.ttft == nil {
			r.ttft, r.tpot = []uint64{}, []uint64{}
		}
		// errors_client is 7 everywhere: a client's error is not the endpoint's.
		if err := batch.Append(r.at.Truncate(time.Second), uint16(r.at.Nanosecond()/1e6), end.Truncate(time.Second), uint16(end.Nanosecond()/1e6),
			"gw-1", r.endpoint, "risk", r.version, r.requests, uint64(7), r.errs, uint64(0), uint64(0), uint64(0),
			r.lat, float64(0), r.streams, r.ttft, float64(0), r.tpot, float64(0), uint64(0), string(rune('a'+i)), uint64(i), pinned(r.pinned)); err != nil {
			t.Fatal(err)
		}
	}
	if err := batch.Send(); err != nil {
		t.Fatal(err)
	}
}

func pinned(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}

// hist is a histogram with n in each of the given buckets.
func hist(n uint64, buckets ...int) []uint64 {
	h := make([]uint64, busapi.LatencyBuckets)
	for _, b := range buckets {
		h[b] += n
	}
	return h
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-6 }

func TestRead(t *testing.T) {
	t.Parallel()
	ch := chtest.New(t)
	now := time.Date(2026, 11, 30, 12, 0, 5, 0, time.UTC)
	step := 10 * time.Second
	// The window is 3 steps of 10 s: [11:59:40, 12:00:10).
	from := time.Date(2026, 11, 30, 11, 59, 40, 0, time.UTC)
	b := busapi.LatencyBoundsUS()
	insert(t, ch,
		// Step 0 of v1: two windows, 100 requests in all, 10 errors.
		row{at: from.Add(123 * time.Millisecond), endpoint: "fraud", version: "v1", requests: 60, errs: 4, lat: hist(60, 5)},
		row{at: from.Add(5*time.Second + 123*time.Millisecond), endpoint: "fraud", version: "v1", requests: 40, errs: 6, lat: hist(40, 20)},
		// Step 2 of v1.
		row{at: from.Add(20 * time.Second), endpoint: "fraud", version: "v1", requests: 20, lat: hist(20, 3)},
		// v2 streams.
		row{at: from.Add(10 * time.Second), endpoint: "fraud", version: "v2", requests: 10, streams: 10,
			lat: hist(10, 30), ttft: hist(10, 8), tpot: hist(10, 1)},
		// Outside the window, and another endpoint: not counted.
		row{at: from.Add(-time.Second), endpoint: "fraud", version: "v1", requests: 1000, lat: hist(1000, 0)},
		row{at: from.Add(30 * time.Second), endpoint: "fraud", version: "v1", requests: 1000, lat: hist(1000, 0)},
		row{at: from, endpoint: "chat", version: "v1", requests: 1000, lat: hist(1000, 0)},
	)
	clk := quartz.NewMock(t)
	clk.Set(now)
	r := reqstats.NewReader(ch, clk)
	w, err := r.Read(t.Context(), "fraud", 0, 3, step)
	if err != nil {
		t.Fatal(err)
	}
	if !w.From.Equal(from) || len(w.Versions) != 2 {
		t.Fatalf("window from %v with %d versions, want %v with 2", w.From, len(w.Versions), from)
	}
	v1, v2 := w.Versions[0], w.Versions[1]
	if v1.Version != "v1" || v1.Streaming || len(v1.Points) != 3 {
		t.Fatalf("v1 = %+v", v1)
	}
	p := v1.Points[0]
	if p.Requests != 100 || !near(p.QPS, 10) || p.Errors != 10 || !near(p.ErrorRate, 0.1) {
		t.Errorf("v1 step 0: requests %d qps %v errors %d rate %v, want 100 10 10 0.1", p.Requests, p.QPS, p.Errors, p.ErrorRate)
	}
	// The 50th of 100 lies in bucket 5 (60 samples), at 50/60 of it.
	if want := (float64(b[4]) + float64(b[5]-b[4])*50/60) / 1000; !near(p.P50MS, want) {
		t.Errorf("v1 p50 = %v, want %v", p.P50MS, want)
	}
	// The 99th lies in bucket 20 (40 samples), at 39/40 of it.
	if want := (float64(b[19]) + float64(b[20]-b[19])*39/40) / 1000; !near(p.P99MS, want) {
		t.Errorf("v1 p99 = %v, want %v", p.P99MS, want)
	}
	if p := v1.Points[1]; p.Requests != 0 || p.QPS != 0 || p.P50MS != 0 {
		t.Errorf("v1 step 1 = %+v, want empty", p)
	}
	if p := v1.Points[2]; p.Requests != 20 || !near(p.QPS, 2) || p.ErrorRate != 0 {
		t.Errorf("v1 step 2 = %+v, want 20 requests", p)
	}
	if v2.Version != "v2" || !v2.Streaming {
		t.Fatalf("v2 = %+v, want streaming", v2)
	}
	p = v2.Points[1]
	if want := (float64(b[7]) + float64(b[8]-b[7])*0.5) / 1000; p.Streams != 10 || !near(p.TTFTP50MS, want) {
		t.Errorf("v2 ttft p50 = %v streams %d, want %v 10", p.TTFTP50MS, p.Streams, want)
	}
	if want := (float64(b[0]) + float64(b[1]-b[0])*0.99) / 1000; !near(p.TPOTP99MS, want) {
		t.Errorf("v2 tpot p99 = %v, want %v", p.TPOTP99MS, want)
	}
}

func TestReadRefusesBadWindow(t *testing.T) {
	t.Parallel()
	r := reqstats.NewReader(nil, nil)
	for _, steps := range []int{0, -1, reqstats.MaxSteps + 1} {
		if _, err := r.Read(t.Context(), "fraud", 0, steps, time.Minute); err == nil {
			t.Errorf("Read(%d steps) succeeded, want ErrWindow", steps)
		}
	}
}

func TestLastSteps(t *testing.T) {
	t.Parallel()
	ch := chtest.New(t)
	now := time.Date(2026, 11, 30, 12, 0, 5, 0, time.UTC)
	clk := quartz.NewMock(t)
	clk.Set(now)
	r := reqstats.NewReader(ch, clk)
	tests := []struct {
		minutes int
		points  int
		step    time.Duration
	}{{5, 30, 10 * time.Second}, {10, 60, 10 * time.Second}, {30, 30, time.Minute}, {reqstats.MaxMinutes, reqstats.MaxMinutes, time.Minute}}
	insert(t, ch, row{at: now, endpoint: "fraud", version: "v1", requests: 1, lat: hist(1, 0)})
	for _, tt := range tests {
		w, err := r.Last(t.Context(), "fraud", 0, tt.minutes)
		if err != nil {
			t.Fatal(err)
		}
		if w.Step != tt.step || len(w.Versions) != 1 || len(w.Versions[0].Points) != tt.points {
			t.Errorf("Last(%d): step %v, %d versions, want step %v with %d points", tt.minutes, w.Step, len(w.Versions), tt.step, tt.points)
		}
		if got := w.Versions[0].Points[tt.points-1].Requests; got != 1 {
			t.Errorf("Last(%d): last point has %d requests, want the one just sent", tt.minutes, got)
		}
	}
	if _, err := r.Last(t.Context(), "fraud", 0, reqstats.MaxMinutes+1); !errors.Is(err, reqstats.ErrWindow) {
		t.Errorf("Last(too long) = %v, want ErrWindow", err)
	}
}

// TestThrough: how far an endpoint's statistics have arrived is the end of
// its newest unpinned window started at or after since; nothing when none
// has, and another endpoint's windows do not count.
func TestThrough(t *testing.T) {
	t.Parallel()
	ch := chtest.New(t)
	r := reqstats.NewReader(ch, nil)
	since := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	got, err := r.Through(t.Context(), "chat", 0, since)
	if err != nil || !got.IsZero() {
		t.Fatalf("Through with no statistics = %v, %v; want the zero time", got, err)
	}
	// insert's windows end 5 s after they start.
	insert(t, ch,
		row{at: since.Add(-10 * time.Second), endpoint: "chat", version: "v42", requests: 1},
		row{at: since.Add(2 * time.Second), endpoint: "chat", version: "v42", requests: 1},
		row{at: since.Add(7*time.Second + 250*time.Millisecond), endpoint: "chat", version: "v43", requests: 1},
		row{at: since.Add(time.Hour), endpoint: "fraud", version: "v1", requests: 1},
		// Pinned requests are not the split's, which the judge reads.
		row{at: since.Add(time.Minute), endpoint: "chat", version: "v43", requests: 1, pinned: true},
	)
	got, err = r.Through(t.Context(), "chat", 0, since)
	if want := since.Add(12*time.Second + 250*time.Millisecond); err != nil || !got.Equal(want) {
		t.Errorf("Through = %v, %v; want %v, the end of chat's newest unpinned window", got, err, want)
	}
	got, err = r.Through(t.Context(), "chat", 0, since.Add(time.Minute))
	if err != nil || !got.IsZero() {
		t.Errorf("Through since a minute later = %v, %v; want the zero time: no window started since", got, err)
	}
}

func TestTotals(t *testing.T) {
	t.Parallel()
	ch := chtest.New(t)
	from := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	to := from.Add(10 * time.Second)
	insert(t, ch,
		row{at: from, endpoint: "chat", version: "v42", requests: 50, errs: 1, streams: 50, lat: hist(50, 10), ttft: hist(50, 3), tpot: hist(50, 2)},
		row{at: from.Add(9*time.Second + 999*time.Millisecond), endpoint: "chat", version: "v42", requests: 30, errs: 2, streams: 30,
			lat: hist(30, 11), ttft: hist(30, 3), tpot: hist(30, 4)},
		row{at: from.Add(3 * time.Second), endpoint: "chat", version: "v43", requests: 5, streams: 5, lat: hist(5, 12), ttft: hist(5, 3), tpot: hist(5, 9)},
		// Outside [from, to) and another endpoint: not counted.
		row{at: from.Add(-time.Millisecond), endpoint: "chat", version: "v42", requests: 1000, lat: hist(1000, 0)},
		row{at: to, endpoint: "chat", version: "v42", requests: 1000, lat: hist(1000, 0)},
		row{at: from, endpoint: "fraud", version: "v42", requests: 1000, lat: hist(1000, 0)},
	)
	got, err := reqstats.NewReader(ch, nil).Totals(t.Context(), "chat", 0, from, to)
	if err != nil {
		t.Fatal(err)
	}
	v42, v43 := got["v42"], got["v43"]
	if len(got) != 2 || v42.Requests != 80 || v42.Errors != 3 || v42.Streams != 80 || v43.Requests != 5 || v43.Streams != 5 {
		t.Fatalf("totals = %+v; want v42 80 requests, 3 errors, 80 streams and v43 5 requests", got)
	}
	if v42.TPOT[2] != 50 || v42.TPOT[4] != 30 || v42.Latency[10] != 50 || v42.Latency[11] != 30 || v43.TPOT[9] != 5 {
		t.Errorf("histograms not summed per bucket: v42 tpot %v latency %v, v43 tpot %v", v42.TPOT, v42.Latency, v43.TPOT)
	}
	if _, err := reqstats.NewReader(ch, nil).Totals(t.Context(), "chat", 0, to, from); !errors.Is(err, reqstats.ErrWindow) {
		t.Errorf("Totals(to, from) error = %v, want ErrWindow", err)
	}
}
