package chargeback

import (
	"testing"
	"time"

	"github.com/coder/quartz"

	"modelplane/internal/chtest"
)

// TestSealedDaysAreReadFromTheDailyTable checks where whole hours are read
// from: sealed days from the daily table, hours around days from the hourly
// rollup; and that a day whose daily rows do not add up to its seal in the
// report's own read (dropped by a reseal after the report planned its
// spans, the moment the old separate verification could not see) is read
// from the hourly rollup, so the totals stay whole.
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
		team := "risk"
		if h%2 == 1 {
			team = "search"
		}
		if err := b.Append(d0.Add(time.Duration(h)*time.Hour), team, "fraud", "A100-80GB", "full", uint64(3600), uint64(3600*3_500_000)); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Send(); err != nil {
		t.Fatal(err)
	}
	now := d0.Add(30 * 24 * time.Hour)
	clk := quartz.NewMock(t)
	clk.Set(now)
	if n, err := NewSealer(ch, nil, clk).Seal(ctx); err != nil || n != 3 {
		t.Fatalf("Seal = %d, %v; want 3 days", n, err)
	}
	s := New(ch, nil, clk)
	from, to := d0.Add(5*time.Hour), d0.Add(3*24*time.Hour)
	spans, seals, err := s.wholeHours(ctx, from, to)
	if err != nil {
		t.Fatal(err)
	}
	want := []span{{from, d0.Add(24 * time.Hour), tableHourly}, {d0.Add(24 * time.Hour), to, tableDaily}, {to, to, tableHourly}}
	if !equalSpans(spans, want) {
		t.Fatalf("spans = %v, want %v", spans, want)
	}
	// The usual read verifies the sealed days itself (per-day sums in the
	// same SELECT).
	if rows, ok, err := s.readSealed(ctx, []Dimension{DimTeam}, filter{all: true, team: "risk"}, d0.Add(24*time.Hour), to, seals); err != nil || !ok ||
		len(rows) != 1 || rows[0].GPUSeconds != 24*3600 {
		t.Fatalf("readSealed = %+v, %v, %v; want risk's 24 hours of 2 and 3 October, verified", rows, ok, err)
	}
	for _, tc := range []struct {
		name string
		f    filter
		want int64 // GPU seconds
	}{
		{"all teams", filter{all: true}, 67 * 3600},
		{"team risk", filter{all: true, team: "risk"}, 33 * 3600}, // even hours from 6 to 70
		{"scoped to search", filter{teams: []string{"search"}}, 34 * 3600},
	} {
		for _, drop := range []bool{false, true} {
			s.beforeRead = nil
			if drop {
				// A reseal of 2 October strikes between planning and reading.
				s.beforeRead = func() {
					if err := ch.Exec(ctx, "ALTER TABLE gpu_usage_daily DROP PARTITION '2026-10-02'"); err != nil {
						t.Fatal(err)
					}
				}
			}
			rows, err := s.usage(ctx, nil, tc.f, from, to, SourceAuto)
			if err != nil {
				t.Fatal(err)
			}
			var got int64
			for _, r := range rows {
				got += r.GPUSeconds
			}
			if got != tc.want {
				t.Errorf("%s (day dropped mid-report %v): GPU seconds = %d, want %d", tc.name, drop, got, tc.want)
			}
		}
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
