package drift_test

import (
	"context"
	"testing"
	"time"

	"github.com/coder/quartz"

	"modelplane/drift"
	"modelplane/internal/chtest"
	"modelplane/internal/pgtest"
)

// TestRetentionPurgesRecreatedEndpoint checks that an endpoint deleted and
// created again under the same name (here by the same team; it could be
// another) never shows the old endpoint's data: retention removes samples
// and request statistics (raw and pre-aggregated) whose endpoint id is not
// the current endpoint's, and keeps the current one's and rows from before
// ids were recorded (0).
func TestRetentionPurgesRecreatedEndpoint(t *testing.T) {
	t.Parallel()
	pool, ch := pgtest.New(t), chtest.New(t)
	ctx := context.Background()
	seed(t, pool, "fraud")
	var id int64
	if err := pool.QueryRow(ctx, `SELECT id FROM endpoints WHERE name = 'fraud'`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 30, 15, 0, 0, 0, time.UTC)
	old := id + 1000 // the deleted endpoint of the same name
	samples, err := ch.PrepareBatch(ctx, "INSERT INTO prediction_samples (ts, endpoint, team, version, request_id, score, endpoint_id)")
	if err != nil {
		t.Fatal(err)
	}
	stats, err := ch.PrepareBatch(ctx, "INSERT INTO request_stats (window_start, window_end, gateway, endpoint, team, version, requests, "+
		"latency_buckets, ttft_buckets, tpot_buckets, msg_id, endpoint_id)")
	if err != nil {
		t.Fatal(err)
	}
	at := now.Add(-time.Hour)
	for i, eid := range []int64{old, old, id, 0} {
		if err := samples.Append(at, "fraud", "risk", "v1", string(rune('a'+i)), 0.5, eid); err != nil {
			t.Fatal(err)
		}
		if err := stats.Append(at, at.Add(5*time.Second), "gw", "fraud", "risk", "v1", uint64(10), []uint64{}, []uint64{}, []uint64{}, string(rune('a'+i)), eid); err != nil {
			t.Fatal(err)
		}
	}
	if err := samples.Send(); err != nil {
		t.Fatal(err)
	}
	if err := stats.Send(); err != nil {
		t.Fatal(err)
	}
	clk := quartz.NewMock(t)
	clk.Set(now)
	if _, err := drift.NewRetention(pool, ch, quiet, clk).Apply(ctx); err != nil {
		t.Fatal(err)
	}
	waitMutations(t, ch)
	for _, table := range []string{"prediction_samples", "request_stats"} {
		var oldRows, kept uint64
		if err := ch.QueryRow(ctx, "SELECT countIf(endpoint_id = ?), countIf(endpoint_id != ?) FROM "+table+" WHERE endpoint = 'fraud'", old, old).Scan(&oldRows, &kept); err != nil {
			t.Fatal(err)
		}
		if oldRows != 0 || kept != 2 {
			t.Errorf("%s after retention: %d rows of the old endpoint, %d others; want 0 and 2", table, oldRows, kept)
		}
	}
	// One row per id in the pre-aggregates (the four windows share their
	// minute and hour).
	for _, table := range []string{"request_stats_minutely", "request_stats_hourly"} {
		var oldRows, kept uint64
		if err := ch.QueryRow(ctx, "SELECT countIf(endpoint_id = ?), uniqExactIf(endpoint_id, endpoint_id != ?) FROM "+table+" WHERE endpoint = 'fraud'", old, old).Scan(&oldRows, &kept); err != nil {
			t.Fatal(err)
		}
		if oldRows != 0 || kept != 2 {
			t.Errorf("%s after retention: %d rows of the old endpoint, %d other ids; want 0 and 2", table, oldRows, kept)
		}
	}
}
