package drift_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/coder/quartz"

	"modelplane/drift"
	"modelplane/internal/chtest"
	"modelplane/internal/pgtest"
)

func TestRetentionRemovesExactlyTheExpiredDays(t *testing.T) {
	t.Parallel()
	pool, ch := pgtest.New(t), chtest.New(t)
	ctx := context.Background()
	seed(t, pool, "long", "short")
	if _, err := pool.Exec(ctx, `UPDATE endpoints SET retention_days = CASE name WHEN 'long' THEN 30 ELSE 7 END`); err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 30, 15, 0, 0, 0, time.UTC)
	today := now.Truncate(24 * time.Hour)
	// Two samples a day (00:30 and 23:30) for 40 days, for both endpoints
	// and for "gone", an endpoint that was deleted.
	for _, e := range []string{"long", "short", "gone"} {
		var rs []sample
		for d := range 40 {
			day := today.Add(-time.Duration(d) * 24 * time.Hour)
			rs = append(rs, sample{at: day.Add(30 * time.Minute), version: "v23", score: 1}, sample{at: day.Add(23*time.Hour + 30*time.Minute), version: "v23", score: 1})
		}
		insert(t, ch, e, rs)
	}
	clk := quartz.NewMock(t)
	clk.Set(now)
	r := drift.NewRetention(pool, ch, quiet, clk)
	res, err := r.Apply(ctx)
	if err != nil {
		t.Fatal(err)
	}
	waitMutations(t, ch)
	// Days before today−30 are dropped whole: today−31 … today−39.
	var wantDropped []string
	for d := 39; d >= 31; d-- {
		wantDropped = append(wantDropped, today.Add(-time.Duration(d)*24*time.Hour).Format(time.DateOnly))
	}
	if !slices.Equal(res.DroppedDays, wantDropped) {
		t.Errorf("dropped %v, want %v", res.DroppedDays, wantDropped)
	}
	if !slices.Equal(res.Trimmed, []string{"short"}) || !slices.Equal(res.Removed, []string{"gone"}) {
		t.Errorf("trimmed %v, removed %v; want [short], [gone]", res.Trimmed, res.Removed)
	}
	days := func(endpoint string) []string {
		rows, err := ch.Query(ctx, "SELECT DISTINCT toString(toDate(ts)) AS d FROM prediction_samples WHERE endpoint = ? ORDER BY d", endpoint)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var out []string
		for rows.Next() {
			var d string
			if err := rows.Scan(&d); err != nil {
				t.Fatal(err)
			}
			out = append(out, d)
		}
		return out
	}
	span := func(oldest int) []string {
		var out []string
		for d := oldest; d >= 0; d-- {
			out = append(out, today.Add(-time.Duration(d)*24*time.Hour).Format(time.DateOnly))
		}
		return out
	}
	if got, want := days("long"), span(30); !slices.Equal(got, want) {
		t.Errorf("long keeps %v, want %v", got, want)
	}
	if got, want := days("short"), span(7); !slices.Equal(got, want) {
		t.Errorf("short keeps %v, want %v", got, want)
	}
	if got := days("gone"); len(got) != 0 {
		t.Errorf("the deleted endpoint keeps %v", got)
	}
	var n uint64
	if err := ch.QueryRow(ctx, "SELECT count() FROM prediction_samples").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if want := uint64(2 * (31 + 8)); n != want {
		t.Errorf("%d samples left, want %d", n, want)
	}
	// A second pass the same day finds nothing to do.
	res, err = r.Apply(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.DroppedDays)+len(res.Trimmed)+len(res.Removed) != 0 {
		t.Errorf("second pass: %+v, want nothing", res)
	}
}
