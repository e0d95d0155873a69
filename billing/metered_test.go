package billing_test

import (
	"errors"
	"testing"
	"time"

	"modelplane/auth"
	"modelplane/billing"
	"modelplane/internal/chtest"
)

// TestMeterSince sums the rollup from the start of an hour on, rounds the
// cost once, and answers only platform admins and finance.
func TestMeterSince(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	ch := chtest.New(t)
	day := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	b, err := ch.PrepareBatch(ctx, "INSERT INTO gpu_usage (ts, node, gpu_type, profile, team, endpoint, rate_uusd_per_hour, batch_id, row_idx)")
	if err != nil {
		t.Fatal(err)
	}
	// Yesterday's last second does not count; 7,200 seconds of a 1g slice at
	// $0.50/h and one second of a full A100 at $3.50/h today do.
	rows := []struct {
		at   time.Time
		rate uint64
	}{{day.Add(-time.Second), 3_500_000}, {day.Add(10 * time.Hour), 3_500_000}}
	for i := range 7200 {
		rows = append(rows, struct {
			at   time.Time
			rate uint64
		}{day.Add(time.Duration(i) * time.Second), 500_000})
	}
	for i, r := range rows {
		if err := b.Append(r.at, "n1", "A100-80GB", "mig-1g.10gb", "risk", "fraud", r.rate, "n1/1/0", uint32(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Send(); err != nil {
		t.Fatal(err)
	}
	m := billing.NewMeter(ch)
	finance := &auth.Principal{Name: "fin", PlatformRole: auth.RoleFinance}
	got, err := m.Since(ctx, finance, day)
	if err != nil {
		t.Fatal(err)
	}
	// 7,200 × 500,000 / 3,600 = 1,000,000 µUSD; 3,500,000 / 3,600 = 972.2 → 972.
	if want := (billing.Metered{GPUSeconds: 7201, CostMicroUSD: 1_000_972}); got != want {
		t.Fatalf("Since = %+v, want %+v", got, want)
	}
	eng := &auth.Principal{Name: "eng", Teams: []auth.Membership{{TeamID: 1, Team: "risk", Role: auth.RoleAdmin}}}
	if _, err := m.Since(ctx, eng, day); !errors.Is(err, auth.ErrForbidden) {
		t.Fatalf("team admin: err = %v, want ErrForbidden", err)
	}
}
