package reqstats_test

import (
	"context"
	"testing"
	"time"

	"modelplane/internal/chtest"
	"modelplane/reqstats"

	"github.com/coder/quartz"
)

// TestReadersKeepToTheEndpointID: statistics of a deleted endpoint (id 1)
// and of the endpoint created under its name since (id 2) share the name
// and the window, as they do until retention purges the old rows; the
// readers given the new id show only its rows.
func TestReadersKeepToTheEndpointID(t *testing.T) {
	t.Parallel()
	ch := chtest.New(t)
	now := time.Date(2026, 11, 30, 12, 0, 5, 0, time.UTC)
	b, err := ch.PrepareBatch(context.Background(), "INSERT INTO request_stats (window_start, window_end, endpoint, team, version, requests, "+
		"latency_buckets, msg_id, endpoint_id)")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []struct {
		id       int64
		requests uint64
	}{{1, 100}, {2, 3}} {
		if err := b.Append(now.Add(-time.Minute), now.Add(-time.Minute+5*time.Second), "fraud", "risk", "v1", r.requests,
			hist(r.requests, 0), "m"+string(rune('0'+r.id)), r.id); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Send(); err != nil {
		t.Fatal(err)
	}
	clk := quartz.NewMock(t)
	clk.Set(now)
	r := reqstats.NewReader(ch, clk)
	w, err := r.Last(t.Context(), "fraud", 2, 10)
	if err != nil {
		t.Fatal(err)
	}
	var total uint64
	for _, s := range w.Versions {
		for _, p := range s.Points {
			total += p.Requests
		}
	}
	if total != 3 {
		t.Errorf("Last for id 2 counts %d requests, want only its own 3", total)
	}
	tot, err := r.Totals(t.Context(), "fraud", 2, now.Add(-time.Hour), now)
	if err != nil {
		t.Fatal(err)
	}
	if got := tot["v1"].Requests; got != 3 {
		t.Errorf("Totals for id 2 = %d requests, want 3", got)
	}
}
