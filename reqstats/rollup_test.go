package reqstats_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/coder/quartz"

	"modelplane/busapi"
	"modelplane/internal/chtest"
	"modelplane/reqstats"
)

// window is a request_stats row with the columns the pre-aggregates key
// on beyond row's.
type window struct {
	row
	endpointID int64
	pinned     uint8
}

func insertWindows(t *testing.T, ch driver.Conn, seq int, ws []window) {
	t.Helper()
	b, err := ch.PrepareBatch(context.Background(), "INSERT INTO request_stats (window_start, window_start_ms, window_end, window_end_ms, "+
		"gateway, endpoint, team, version, requests, errors_client, errors_upstream, errors_timeout, errors_shed, canceled, "+
		"latency_buckets, latency_sum_ms, streams, ttft_buckets, ttft_sum_ms, tpot_buckets, tpot_sum_ms, tokens, msg_id, stream_seq, pinned, endpoint_id)")
	if err != nil {
		t.Fatal(err)
	}
	for i, w := range ws {
		end := w.at.Add(5 * time.Second)
		if w.ttft == nil {
			w.ttft, w.tpot = []uint64{}, []uint64{}
		}
		if err := b.Append(w.at.Truncate(time.Second), uint16(w.at.Nanosecond()/1e6), end.Truncate(time.Second), uint16(end.Nanosecond()/1e6),
			"gw-1", w.endpoint, "risk", w.version, w.requests, uint64(1), w.errs, uint64(1), uint64(0), uint64(0),
			w.lat, float64(0), w.streams, w.ttft, float64(0), w.tpot, float64(0), uint64(0), fmt.Sprintf("%d-%d", seq, i), uint64(i),
			w.pinned, w.endpointID); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Send(); err != nil {
		t.Fatal(err)
	}
}

// randomWindows are n windows of endpoint "fraud" over [from, from+span)
// at millisecond times (some on whole minutes and hours), over two
// versions, two endpoint ids, pinned or not, streaming or not.
func randomWindows(rng *rand.Rand, from time.Time, span time.Duration, n int) []window {
	ws := make([]window, 0, n)
	for i := range n {
		at := from.Add(time.Duration(rng.Int64N(int64(span/time.Millisecond))) * time.Millisecond)
		switch i % 10 {
		case 0:
			at = at.Truncate(time.Minute)
		case 1:
			at = at.Truncate(time.Minute).Add(-time.Millisecond)
		case 2:
			at = at.Truncate(time.Hour)
		}
		w := window{row: row{at: at, endpoint: "fraud", version: []string{"v1", "v2"}[rng.IntN(2)], requests: uint64(1 + rng.IntN(500)),
			lat: hist(uint64(1+rng.IntN(50)), rng.IntN(busapi.LatencyBuckets), rng.IntN(busapi.LatencyBuckets))},
			endpointID: int64(1 + i%7/6), pinned: uint8(i % 5 / 4)}
		w.errs = uint64(rng.IntN(int(w.requests)))
		if w.version == "v2" {
			w.streams = w.requests
			w.ttft, w.tpot = hist(w.requests, rng.IntN(busapi.LatencyBuckets)), hist(w.requests, rng.IntN(busapi.LatencyBuckets))
		}
		ws = append(ws, w)
	}
	return ws
}

// TestPreAggregatedReadsEqualRawReads: charts in minute steps, the judge's
// totals over windows that start and end inside minutes, and the hourly
// rates read from the pre-aggregates equal the same reads over the raw
// windows, before and after late windows arrive for minutes and hours
// already aggregated.
func TestPreAggregatedReadsEqualRawReads(t *testing.T) {
	t.Parallel()
	ch := chtest.New(t)
	rng := rand.New(rand.NewPCG(31, 3))
	now := time.Date(2026, 11, 30, 14, 7, 31, 250e6, time.UTC)
	start := now.Add(-3 * time.Hour)
	insertWindows(t, ch, 1, randomWindows(rng, start, 3*time.Hour, 3000))
	clk := quartz.NewMock(t)
	clk.Set(now)
	agg := reqstats.NewReader(ch, clk)
	raw := agg.RawOnly()
	ctx := t.Context()

	compare := func(when string) {
		t.Helper()
		for _, id := range []int64{1, 2} {
			for _, minutes := range []int{11, 60, 180} {
				a, err := agg.Last(ctx, "fraud", id, minutes)
				if err != nil {
					t.Fatal(err)
				}
				r, err := raw.Last(ctx, "fraud", id, minutes)
				if err != nil {
					t.Fatal(err)
				}
				if len(r.Versions) != 2 || !reflect.DeepEqual(a, r) {
					t.Errorf("%s: last %d minutes of id %d: pre-aggregated\n%+v\nraw (%d versions)\n%+v", when, minutes, id, a, len(r.Versions), r)
				}
			}
			for _, span := range [][2]time.Duration{{-170 * time.Minute, 0}, {-61*time.Minute - 250*time.Millisecond, -59 * time.Second},
				{-45 * time.Second, -2 * time.Second}, {-2*time.Hour - 7*time.Minute - 31*time.Second - 250*time.Millisecond, -time.Hour}} {
				from, to := now.Add(span[0]), now.Add(span[1])
				a, err := agg.Totals(ctx, "fraud", id, from, to)
				if err != nil {
					t.Fatal(err)
				}
				r, err := raw.Totals(ctx, "fraud", id, from, to)
				if err != nil {
					t.Fatal(err)
				}
				if len(r) == 0 || !reflect.DeepEqual(a, r) {
					t.Errorf("%s: totals of id %d over [%s, %s): pre-aggregated\n%+v\nraw\n%+v", when, id, from, to, a, r)
				}
			}
			a, err := agg.HourlyRates(ctx, "fraud", id, start, now.Add(time.Hour))
			if err != nil {
				t.Fatal(err)
			}
			r, err := raw.HourlyRates(ctx, "fraud", id, start, now.Add(time.Hour))
			if err != nil {
				t.Fatal(err)
			}
			if len(r) < 3 || !reflect.DeepEqual(a, r) {
				t.Errorf("%s: hourly rates of id %d: pre-aggregated %+v, raw %+v", when, id, a, r)
			}
		}
	}
	compare("first")
	// Late windows: a gateway's statistics arrive after their minutes and
	// hours were read (an ingest outage, a redelivery).
	insertWindows(t, ch, 2, randomWindows(rng, start, 3*time.Hour, 500))
	compare("after late windows")
}
