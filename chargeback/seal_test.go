package chargeback_test

import (
	"testing"
	"time"

	"modelplane/chargeback"
	"modelplane/internal/chtest"
)

// TestSealedDaysExact seals three days and checks reports over periods
// around them equal the per-second records under each of groupings(); then late
// usage lands in a sealed day (read exactly again once resealed), and a
// day whose daily rows were lost (a rebuild that died after dropping them)
// is read from the hourly rollup, still exactly.
func TestSealedDaysExact(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	ch := chtest.New(t)
	var rows []rec
	for d := range 3 {
		day := t0.Add(time.Duration(d) * 24 * time.Hour)
		rows = append(rows, fleetUsage(day.Add(23*time.Hour+55*time.Minute-24*time.Hour), day.Add(5*time.Minute))...)
		rows = append(rows, fleetUsage(day.Add(13*time.Hour), day.Add(13*time.Hour+90*time.Second))...)
	}
	insert(t, ch, rows)
	now := t0.Add(20 * 24 * time.Hour)
	clk := clockAt(t, now)
	sealer := chargeback.NewSealer(ch, nil, clk)
	n, err := sealer.Seal(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n != 4 { // Sep 30 (its last minutes) and Oct 1-3
		t.Fatalf("sealed %d days, want 4", n)
	}
	if n, err := sealer.Seal(ctx); err != nil || n != 0 {
		t.Fatalf("second pass sealed %d, %v; want nothing to do", n, err)
	}
	svc := chargeback.New(ch, nil, clk)
	check := func(what string, rows []rec) {
		t.Helper()
		for _, p := range []struct{ from, to time.Time }{
			{t0.Add(-time.Hour), t0.Add(4 * 24 * time.Hour)},
			{t0.Add(-4*time.Minute - 30*time.Second), t0.Add(2*24*time.Hour + 13*time.Hour + 45*time.Second)},
			{t0.Add(24 * time.Hour), t0.Add(2 * 24 * time.Hour)},
		} {
			sec, x := exact(rows, p.from, p.to, nil)
			for _, by := range groupings() {
				rep, err := svc.Report(ctx, finance, chargeback.Query{From: p.from, To: p.to, GroupBy: by})
				if err != nil {
					t.Fatal(err)
				}
				var sum int64
				for _, r := range rep.Rows {
					sum += r.CostMicroUSD
				}
				if rep.Total.GPUSeconds != sec || rep.Total.CostX3600 != x || sum != rep.Total.CostMicroUSD {
					t.Fatalf("%s: %s–%s by %v: %d s, %d x3600 (rows %d µUSD of %d); want %d s, %d",
						what, p.from, p.to, by, rep.Total.GPUSeconds, rep.Total.CostX3600, sum, rep.Total.CostMicroUSD, sec, x)
				}
			}
		}
	}
	check("sealed", rows)

	late := fleetUsage(t0.Add(24*time.Hour+6*time.Hour), t0.Add(24*time.Hour+6*time.Hour+30*time.Second))
	insert(t, ch, late)
	rows = append(rows, late...)
	if n, err := sealer.Seal(ctx); err != nil || n != 1 {
		t.Fatalf("after late usage sealed %d, %v; want the one day resealed", n, err)
	}
	check("resealed", rows)

	if err := ch.Exec(ctx, "ALTER TABLE gpu_usage_daily DROP PARTITION '2026-10-03'"); err != nil {
		t.Fatal(err)
	}
	check("daily rows lost", rows)
}
