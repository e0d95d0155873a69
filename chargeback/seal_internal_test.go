package chargeback

import (
	"testing"
	"time"

	"modelplane/internal/chtest"
)

// TestSealedDaysAreReadFromTheDailyTable checks where whole hours are read
// from: a sealed day from the daily table, a day whose daily rows do not
// add up to its seal from the hourly rollup, hours around days from the
// hourly rollup.
func TestSealedDaysAreReadFromTheDailyTable(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	ch := chtest.New(t)
	d0 := time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC)
	b, err := ch.PrepareBatch(ctx, "INSERT INTO gpu_usage_hourly (hour, team, endpoint, gpu_type, profile, gpu_seconds, cost_uusd_x3600)")
	if err != nil {
		t.Fatal(err)
	}
	for h := range 72 {
		if err := b.Append(d0.Add(time.Duration(h)*time.Hour), "risk", "fraud", "A100-80GB", "full", uint64(3600), uint64(3600*3_500_000)); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Send(); err != nil {
		t.Fatal(err)
	}
	now := d0.Add(30 * 24 * time.Hour)
	if n, err := NewSealer(ch, nil, func() time.Time { return now }).Seal(ctx); err != nil || n != 3 {
		t.Fatalf("Seal = %d, %v; want 3 days", n, err)
	}
	s := New(ch, nil, func() time.Time { return now })
	from, to := d0.Add(5*time.Hour), d0.Add(3*24*time.Hour)
	spans, err := s.wholeHours(ctx, from, to)
	if err != nil {
		t.Fatal(err)
	}
	want := []span{{from, d0.Add(24 * time.Hour), tableHourly}, {d0.Add(24 * time.Hour), to, tableDaily}, {to, to, tableHourly}}
	if !equalSpans(spans, want) {
		t.Fatalf("spans = %v, want %v", spans, want)
	}
	if err := ch.Exec(ctx, "ALTER TABLE gpu_usage_daily DROP PARTITION '2026-10-02'"); err != nil {
		t.Fatal(err)
	}
	spans, err = s.wholeHours(ctx, from, to)
	if err != nil {
		t.Fatal(err)
	}
	want = []span{{from, d0.Add(2 * 24 * time.Hour), tableHourly}, {d0.Add(2 * 24 * time.Hour), to, tableDaily}, {to, to, tableHourly}}
	if !equalSpans(spans, want) {
		t.Fatalf("after losing a day's rows: spans = %v, want %v", spans, want)
	}
}

func equalSpans(a, b []span) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !a[i].from.Equal(b[i].from) || !a[i].to.Equal(b[i].to) || a[i].table != b[i].table {
			return false
		}
	}
	return true
}
