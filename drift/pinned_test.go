package drift_test

import (
	"testing"
	"time"

	"modelplane/drift"
	"modelplane/internal/chtest"
)

// TestCompareSkipsPinned checks that the drift gate of a rollout reads no
// pinned samples (X-Model-Version): a caller could otherwise pin skewed
// inputs to the candidate and fail or pass its gate.
func TestCompareSkipsPinned(t *testing.T) {
	t.Parallel()
	ch := chtest.New(t)
	ctx := t.Context()
	n := 400
	f0, f1, s := normal(n, 100, 20, 1), normal(n, 40, 10, 2), normal(n, 0.12, 0.18, 3)
	insert(t, ch, "fraud", rows("v1", base, time.Hour, f0, f1, s))
	insert(t, ch, "fraud", rows("v2", base, time.Hour, f0, f1, s))
	// 5000 pinned samples of v2, all with a score far from the rest.
	if err := ch.Exec(ctx, `INSERT INTO prediction_samples (ts, endpoint, team, version, request_id, score, pinned)
		SELECT toDateTime(?) + number % 3600, 'fraud', 'risk', 'v2', concat('pinned-', toString(number)), 50, 1 FROM numbers(5000)`, base.Unix()); err != nil {
		t.Fatal(err)
	}
	d, err := drift.NewReader(ch, drift.ReaderConfig{}).Compare(ctx, "fraud", 0, "v2", "v1", base, base.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if d.CurrentSamples != uint64(n) || d.ReferenceSamples != uint64(n) || d.Drifting {
		t.Errorf("compare = %d candidate samples, %d reference, drifting %v; want %d each and no drift (pinned samples left out)",
			d.CurrentSamples, d.ReferenceSamples, d.Drifting, n)
	}
}
