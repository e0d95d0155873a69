package billing_test

import (
	"context"
	"os"
	"testing"
	"time"

	"modelplane/billing"
	"modelplane/db"
	"modelplane/internal/chtest"
	"modelplane/internal/pgtest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	chtest.Stop()
	pgtest.Stop()
	os.Exit(code)
}

// TestDefaultRates checks the seeded rates of the seed documents' cost model,
// each MIG profile at its own rate rather than a share of the full GPU.
func TestDefaultRates(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rates, err := billing.LoadRates(ctx, db.New(pgtest.New(t)))
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		gpuType, profile string
		want             int64
	}{
		{"A100-80GB", "full", 3_500_000},
		{"A100-80GB", "mig-1g.10gb", 500_000},
		{"A100-80GB", "mig-2g.20gb", 1_000_000},
		{"A100-80GB", "mig-3g.40gb", 1_750_000},
		{"A100-80GB", "mig-7g.80gb", 3_500_000},
		{"H100-80GB", "full", 5_500_000},
		{"H100-80GB", "mig-1g.10gb", 800_000},
		{"H100-80GB", "mig-3g.40gb", 2_750_000},
	} {
		got, ok := rates.At(tc.gpuType, tc.profile, at)
		if !ok || got != tc.want {
			t.Errorf("At(%s, %s) = %d, %v; want %d, true", tc.gpuType, tc.profile, got, ok, tc.want)
		}
	}
	if got, ok := rates.At("A100-80GB", "mig-5g.50gb", at); ok {
		t.Errorf("unknown profile: got %d, true; want not found", got)
	}
	if got, ok := rates.At("T4", "full", at); ok {
		t.Errorf("unknown GPU type: got %d, true; want not found", got)
	}
}

// TestRateChangeMidHour enters a price change at 10:30:00 and one at
// 11:15:00.5 in PostgreSQL and bills every second of 10:00–12:00: the first
// splits the hour exactly at the second, the second applies from 11:15:01
// because the second that starts at 11:15:00 began before it.
func TestRateChangeMidHour(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.New(t)
	const old, mid, late = 3_500_000, 4_200_000, 3_999_999
	day := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	change := day.Add(10*time.Hour + 30*time.Minute)
	change2 := day.Add(11*time.Hour + 15*time.Minute + 500*time.Millisecond)
	for _, r := range []struct {
		from time.Time
		rate int64
	}{{change, mid}, {change2, late}} {
		if _, err := pool.Exec(ctx, `INSERT INTO cost_rates (gpu_type, profile, uusd_per_hour, effective_from) VALUES ('A100-80GB', 'full', $1, $2)`, r.rate, r.from); err != nil {
			t.Fatal(err)
		}
	}
	rates, err := billing.LoadRates(ctx, db.New(pool))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		at   time.Time
		want int64
	}{
		{change.Add(-time.Second), old},
		{change.Add(-time.Nanosecond), old},
		{change, mid},
		{change.Add(time.Second), mid},
		{change2.Add(-500 * time.Millisecond), mid}, // 11:15:00 started before the change
		{change2.Add(500 * time.Millisecond), late},
		{day.AddDate(1, 0, 0), late},
		{time.Unix(0, 0), old},
	} {
		if got, ok := rates.At("A100-80GB", "full", tc.at); !ok || got != tc.want {
			t.Errorf("At(%s) = %d, %v; want %d", tc.at.Format(time.RFC3339Nano), got, ok, tc.want)
		}
	}
	// Sum the numerator (µUSD × 3600) over 10:00–12:00 second by second, as
	// the ingest consumer and the hourly rollup do.
	var hour10, hour11 int64
	for s := day.Add(10 * time.Hour); s.Before(day.Add(12 * time.Hour)); s = s.Add(time.Second) {
		r, _ := rates.At("A100-80GB", "full", s)
		if s.Hour() == 10 {
			hour10 += r
		} else {
			hour11 += r
		}
	}
	if want := int64(1800*old + 1800*mid); hour10 != want {
		t.Errorf("10:00 hour = %d µUSD×3600, want %d (1800 s at each rate)", hour10, want)
	}
	if want := int64(901*mid + 2699*late); hour11 != want {
		t.Errorf("11:00 hour = %d µUSD×3600, want %d (901 s at %d, 2699 s at %d)", hour11, want, mid, late)
	}
}

func TestNewRates(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	rates := billing.NewRates([]billing.Rate{
		{GPUType: "H100-80GB", Profile: "mig-1g.10gb", UUSDPerHour: 900_000, EffectiveFrom: t0.Add(time.Hour)},
		{GPUType: "H100-80GB", Profile: "mig-1g.10gb", UUSDPerHour: 800_000, EffectiveFrom: t0},
		{GPUType: "H100-80GB", Profile: "full", UUSDPerHour: 5_500_000, EffectiveFrom: t0},
	})
	for _, tc := range []struct {
		name    string
		profile string
		at      time.Time
		want    int64
		wantOK  bool
	}{
		{"before any rate", "mig-1g.10gb", t0.Add(-time.Second), 0, false},
		{"first rate", "mig-1g.10gb", t0, 800_000, true},
		{"out of order input", "mig-1g.10gb", t0.Add(time.Hour), 900_000, true},
		{"last second of first rate", "mig-1g.10gb", t0.Add(time.Hour - time.Second), 800_000, true},
		{"full GPU beside its slices", "full", t0.Add(2 * time.Hour), 5_500_000, true},
	} {
		got, ok := rates.At("H100-80GB", tc.profile, tc.at)
		if got != tc.want || ok != tc.wantOK {
			t.Errorf("%s: got %d, %v; want %d, %v", tc.name, got, ok, tc.want, tc.wantOK)
		}
	}
	if n := rates.Len(); n != 3 {
		t.Errorf("Len = %d, want 3", n)
	}
	var nilRates *billing.Rates
	if _, ok := nilRates.At("H100-80GB", "full", t0); ok {
		t.Error("nil table priced a second")
	}
}
