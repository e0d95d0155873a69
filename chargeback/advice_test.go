package chargeback_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"modelplane/auth"
	"modelplane/chargeback"
	"modelplane/db"
	"modelplane/internal/chtest"
	"modelplane/internal/pgtest"
)

// TestAdvise writes a week of hourly rollup rows for three endpoints and
// checks each rule fires with its numbers, and only for what it describes:
// two whole A100s at 20% and 8 GB fit mig-2g.20gb (1g's seventh of the
// compute is under 20% plus a fifth; saving $2.50/h each at the default
// rates), and at a third of the target load keep their minimum; four 1g slices at 6% utilisation, a tenth of the 60%
// target, with a minimum of 4, can go down to 1; an endpoint serving in 4
// hours of each day is idle 20 h a day and should scale to zero.
func TestAdvise(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	ch := chtest.New(t)
	pool := pgtest.New(t)
	now := time.Date(2026, 10, 20, 0, 30, 0, 0, time.UTC)
	start := now.Truncate(time.Hour).Add(-chargeback.AdviceWindow)
	b, err := ch.PrepareBatch(ctx, "INSERT INTO gpu_usage_hourly (hour, team, endpoint, model, version, replica, gpu_type, profile, "+
		"gpu_seconds, cost_uusd_x3600, requests, util_pct_sum, memory_mb_sum)")
	if err != nil {
		t.Fatal(err)
	}
	type alloc struct {
		endpoint, replica, profile string
		rate                       uint64
		util                       float64
		memMB                      uint64
		busy                       func(h int) bool
	}
	always := func(int) bool { return true }
	allocs := []alloc{
		{"big", "big-0", "full", 3_500_000, 20, 8192, always},
		{"big", "big-1", "full", 3_500_000, 20, 8192, always},
		{"quiet", "quiet-0", "full", 3_500_000, 50, 60_000, func(h int) bool { return h%24 < 4 }},
	}
	for i := range 4 {
		allocs = append(allocs, alloc{"low", "low-" + string(rune('0'+i)), "mig-1g.10gb", 500_000, 6, 4000, always})
	}
	for h := range int(chargeback.AdviceWindow / time.Hour) {
		for _, a := range allocs {
			req := uint64(0)
			if a.busy(h) {
				req = 100
			}
			if err := b.Append(start.Add(time.Duration(h)*time.Hour), "risk", a.endpoint, "m", "v1", a.replica, "A100-80GB", a.profile,
				uint64(3600), 3600*a.rate, req, 3600*a.util, 3600*a.memMB); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := b.Send(); err != nil {
		t.Fatal(err)
	}
	svc := chargeback.New(ch, db.New(pool), clockAt(t, now))
	mins := map[string]int32{"big": 2, "quiet": 1, "low": 4}
	adv := chargeback.NewAdvisor(svc, func(_ context.Context, _ *auth.Principal, name string) (int32, error) {
		if m, ok := mins[name]; ok {
			return m, nil
		}
		return 0, errors.New("no such endpoint")
	})
	got, err := adv.Advise(ctx, riskEng, "")
	if err != nil {
		t.Fatal(err)
	}
	byKind := map[string]chargeback.Advice{}
	for _, a := range got {
		if _, dup := byKind[a.Kind]; dup {
			t.Errorf("two %s suggestions: %+v", a.Kind, got)
		}
		byKind[a.Kind] = a
	}
	if len(got) != 3 {
		t.Fatalf("%d suggestions, want 3: %+v", len(got), got)
	}
	mig := byKind[chargeback.AdviceMIG]
	if mig.Endpoint != "big" || mig.SuggestedProfile != "mig-2g.20gb" || mig.AvgReplicas != 2 || mig.AvgUtilPct != 20 ||
		mig.MonthlySavingUUSD != 2*2_500_000*7305/10 {
		t.Errorf("MIG advice = %+v; want big → mig-2g.20gb saving 2 × $2.50 × 730.5 h", mig)
	}
	low := byKind[chargeback.AdviceLowerMin]
	if low.Endpoint != "low" || low.MinReplicas != 4 || low.SuggestedMin != 1 || low.AvgReplicas != 4 ||
		low.MonthlySavingUUSD != 3*500_000*7305/10 {
		t.Errorf("lower-minimum advice = %+v; want low 4 → 1 saving 3 × $0.50 × 730.5 h", low)
	}
	zero := byKind[chargeback.AdviceScaleToZero]
	if zero.Endpoint != "quiet" || zero.IdleHoursPerDay != 20 || zero.MonthlySavingUUSD != 3_500_000*20*7305/240 {
		t.Errorf("scale-to-zero advice = %+v; want quiet idle 20 h a day saving 20/24 of $3.50 × 730.5 h", zero)
	}
	for _, a := range got {
		if a.Summary == "" {
			t.Errorf("%s advice has no summary", a.Kind)
		}
	}
	if other, err := adv.Advise(ctx, &auth.Principal{Name: "s", Teams: []auth.Membership{{TeamID: 2, Team: "search", Role: auth.RoleAdmin}}}, ""); err != nil || len(other) != 0 {
		t.Errorf("search admin gets %+v, %v; want no advice on risk's endpoints", other, err)
	}
	one, err := adv.Advise(ctx, riskEng, "big")
	if err != nil || len(one) != 1 || one[0].Kind != chargeback.AdviceMIG {
		t.Errorf("advice for big alone = %+v, %v; want its MIG advice", one, err)
	}
}
