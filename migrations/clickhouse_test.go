package migrations_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"modelplane/busapi"
	"modelplane/internal/chtest"
	"modelplane/migrations"
)

// statsRow is one gateway window of request_stats.
type statsRow struct {
	at                              time.Time
	endpoint, team, version, caller string
	requests, errs, streams, tokens uint64
	pinned                          uint8
	bucket                          int
}

func insertStats(t *testing.T, ch driver.Conn, seq int, rows ...statsRow) {
	t.Helper()
	b, err := ch.PrepareBatch(context.Background(), "INSERT INTO request_stats (window_start, window_start_ms, window_end, window_end_ms, "+
		"gateway, endpoint, team, version, requests, errors_client, errors_upstream, errors_timeout, errors_shed, canceled, "+
		"latency_buckets, latency_sum_ms, streams, ttft_buckets, ttft_sum_ms, tpot_buckets, tpot_sum_ms, tokens, msg_id, stream_seq, "+
		"pinned, endpoint_id, caller_team)")
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range rows {
		lat := make([]uint64, busapi.LatencyBuckets)
		lat[r.bucket] = r.requests
		ttft, tpot := []uint64{}, []uint64{}
		if r.streams > 0 {
			ttft, tpot = lat, lat
		}
		end := r.at.Add(5 * time.Second)
		if err := b.Append(r.at.Truncate(time.Second), uint16(r.at.Nanosecond()/1e6), end.Truncate(time.Second), uint16(end.Nanosecond()/1e6),
			"gw", r.endpoint, r.team, r.version, r.requests, uint64(1), r.errs, uint64(0), uint64(0), uint64(0),
			lat, float64(0), r.streams, ttft, float64(0), tpot, float64(0), r.tokens, fmt.Sprintf("m%d-%d", seq, i), uint64(seq*1000+i),
			r.pinned, int64(7), r.caller); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Send(); err != nil {
		t.Fatal(err)
	}
}

// query returns the rows of q as strings, in order.
func query(t *testing.T, ch driver.Conn, q string) []string {
	t.Helper()
	rows, err := ch.Query(context.Background(), "SELECT toString(tuple(*)) FROM ("+q+")")
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// The pre-aggregates and the raw rows, summed the same way.
const (
	minutelyAgg = `SELECT minute, endpoint, endpoint_id, version, pinned, sumMerge(requests), sumMerge(errors), sumMerge(streams),
		sumForEachMerge(latency_buckets), sumForEachMerge(ttft_buckets), sumForEachMerge(tpot_buckets)
		FROM request_stats_minutely GROUP BY minute, endpoint, endpoint_id, version, pinned ORDER BY minute, endpoint, version, pinned`
	minutelyRaw = `SELECT toStartOfMinute(window_start) AS minute, endpoint, endpoint_id, version, pinned, sum(requests),
		sum(errors_upstream + errors_timeout + errors_shed), sum(streams),
		sumForEach(latency_buckets), sumForEach(ttft_buckets), sumForEach(tpot_buckets)
		FROM request_stats GROUP BY minute, endpoint, endpoint_id, version, pinned ORDER BY minute, endpoint, version, pinned`
	hourlyAgg = `SELECT hour, endpoint, endpoint_id, team, version, caller_team, via_graph, via_graph_version, sum(requests), sum(tokens)
		FROM request_stats_hourly GROUP BY hour, endpoint, endpoint_id, team, version, caller_team, via_graph, via_graph_version
		ORDER BY hour, endpoint, team, version, caller_team`
	hourlyRaw = `SELECT toStartOfHour(window_start) AS hour, endpoint, endpoint_id, team, version, caller_team, via_graph, via_graph_version,
		sum(requests), sum(tokens)
		FROM request_stats GROUP BY hour, endpoint, endpoint_id, team, version, caller_team, via_graph, via_graph_version
		ORDER BY hour, endpoint, team, version, caller_team`
)

func sameRows(t *testing.T, ch driver.Conn, what, agg, raw string, least int) {
	t.Helper()
	a, r := query(t, ch, agg), query(t, ch, raw)
	if len(r) < least {
		t.Fatalf("%s: %d raw groups, want at least %d", what, len(r), least)
	}
	if fmt.Sprint(a) != fmt.Sprint(r) {
		t.Errorf("%s: pre-aggregate\n%v\nraw rows\n%v", what, a, r)
	}
}

// TestRequestStatsRollupsBackfillAndFollow: migration 0013 backfills the
// minute and hour pre-aggregates from the windows an earlier release
// stored, and its views keep them equal to the raw rows for windows
// inserted afterwards, late ones into minutes and hours already
// aggregated included.
func TestRequestStatsRollupsBackfillAndFollow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ch := chtest.Empty(t)
	if err := migrations.ClickHouseUpTo(ctx, ch, 12); err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 11, 30, 11, 58, 30, 0, time.UTC)
	var before []statsRow
	for i := range 40 {
		// Every 7.5 s across 11:58:30 to 12:03:22: minutes and an hour
		// boundary crossed, two versions, pinned and caller rows.
		at := t0.Add(time.Duration(i) * 7500 * time.Millisecond)
		before = append(before, statsRow{at: at, endpoint: "fraud", team: "risk", version: []string{"v1", "v2"}[i%2],
			requests: uint64(10 + i), errs: uint64(i % 3), streams: uint64(i % 2 * 4), tokens: uint64(i * 11),
			pinned: uint8(i % 5 / 4), caller: []string{"", "search"}[i%3/2], bucket: i % busapi.LatencyBuckets})
	}
	insertStats(t, ch, 1, before...)
	if err := migrations.ClickHouse(ctx, ch); err != nil {
		t.Fatal(err)
	}
	sameRows(t, ch, "minutely after the backfill", minutelyAgg, minutelyRaw, 6)
	sameRows(t, ch, "hourly after the backfill", hourlyAgg, hourlyRaw, 4)

	// Later windows, and late ones for minutes and hours already there.
	insertStats(t, ch, 2,
		statsRow{at: t0.Add(10 * time.Minute), endpoint: "fraud", team: "risk", version: "v1", requests: 5, tokens: 3, bucket: 4},
		statsRow{at: t0.Add(time.Second + 999*time.Millisecond), endpoint: "fraud", team: "risk", version: "v1", requests: 9, errs: 2, bucket: 9},
		statsRow{at: time.Date(2026, 11, 30, 11, 59, 59, 999e6, time.UTC), endpoint: "fraud", team: "risk", version: "v2", requests: 3, streams: 3, tokens: 30, bucket: 1},
		statsRow{at: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC), endpoint: "chat", team: "llm", version: "v1", requests: 2, caller: "risk", tokens: 200, bucket: 2},
	)
	sameRows(t, ch, "minutely after late windows", minutelyAgg, minutelyRaw, 8)
	sameRows(t, ch, "hourly after late windows", hourlyAgg, hourlyRaw, 5)
	// Applying the migrations again backfills nothing twice.
	if err := migrations.ClickHouse(ctx, ch); err != nil {
		t.Fatal(err)
	}
	sameRows(t, ch, "minutely after a second migrate", minutelyAgg, minutelyRaw, 8)
}
