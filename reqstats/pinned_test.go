package reqstats_test

import (
	"testing"
	"time"

	"modelplane/internal/chtest"
	"modelplane/reqstats"
)

// TestTotalsSkipPinned checks that the judge's totals leave out pinned
// requests (X-Model-Version): a caller who pins requests to a rollout's
// candidate or baseline chose the version, and must not steer the verdict.
func TestTotalsSkipPinned(t *testing.T) {
	t.Parallel()
	ch := chtest.New(t)
	from := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	to := from.Add(10 * time.Second)
	insert(t, ch, row{at: from, endpoint: "fraud", version: "v2", requests: 40, errs: 1, lat: hist(40, 10)})
	batch, err := ch.PrepareBatch(t.Context(), "INSERT INTO request_stats (window_start, window_end, gateway, endpoint, team, version, "+
		"requests, errors_upstream, latency_buckets, ttft_buckets, tpot_buckets, msg_id, pinned)")
	if err != nil {
		t.Fatal(err)
	}
	if err := batch.Append(from, from.Add(5*time.Second), "gw-1", "fraud", "risk", "v2", uint64(1000), uint64(900),
		hist(1000, 20), []uint64{}, []uint64{}, "pinned-1", uint8(1)); err != nil {
		t.Fatal(err)
	}
	if err := batch.Send(); err != nil {
		t.Fatal(err)
	}
	got, err := reqstats.NewReader(ch, nil).Totals(t.Context(), "fraud", 0, from, to)
	if err != nil {
		t.Fatal(err)
	}
	if v2 := got["v2"]; v2.Requests != 40 || v2.Errors != 1 || v2.Latency[20] != 0 {
		t.Errorf("totals of v2 = %+v; want the 40 unpinned requests with 1 error, none of the 1000 pinned", v2)
	}
}
