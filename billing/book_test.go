package billing_test

import (
	"errors"
	"testing"
	"time"

	"github.com/coder/quartz"

	"modelplane/auth"
	"modelplane/billing"
	"modelplane/db"
	"modelplane/field"
	"modelplane/internal/pgtest"
)

// TestBookCreate enters rates as a platform admin: a future rate joins the
// history (kept to the whole second, audited), a back-dated or too-soon one
// is refused, a repeat conflicts, and neither finance (whose role changes
// nothing) nor a team admin may enter one.
func TestBookCreate(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.New(t)
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	clk := quartz.NewMock(t)
	clk.Set(now)
	book := billing.NewBook(pool, clk)
	admin := &auth.Principal{Name: "ops@example.com", PlatformRole: auth.RolePlatformAdmin}
	at := now.Add(time.Hour + 300*time.Millisecond)
	e, err := book.Create(ctx, admin, billing.Rate{GPUType: "A100-80GB", Profile: "full", UUSDPerHour: 3_900_000, EffectiveFrom: at})
	if err != nil {
		t.Fatal(err)
	}
	if want := now.Add(time.Hour + time.Second); !e.EffectiveFrom.Equal(want) || e.CreatedBy != "ops@example.com" {
		t.Fatalf("created %+v, want effective %s by ops@example.com", e, want)
	}
	rates, err := book.Current(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if r, _ := rates.At("A100-80GB", "full", now.Add(time.Hour)); r != 3_500_000 {
		t.Errorf("second before the new rate = %d, want the old 3,500,000", r)
	}
	if r, _ := rates.At("A100-80GB", "full", e.EffectiveFrom); r != 3_900_000 {
		t.Errorf("first second of the new rate = %d, want 3,900,000", r)
	}
	var audited int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM audit_log WHERE action = 'cost_rate.create' AND object_name = 'A100-80GB/full'`).Scan(&audited); err != nil || audited != 1 {
		t.Errorf("audit rows = %d, %v; want 1", audited, err)
	}
	for _, tc := range []struct {
		name  string
		p     *auth.Principal
		r     billing.Rate
		field string
		want  error
	}{
		{"back-dated", admin, billing.Rate{GPUType: "A100-80GB", Profile: "full", UUSDPerHour: 1, EffectiveFrom: now.Add(-time.Hour)}, "effective_from", nil},
		{"inside the lead", admin, billing.Rate{GPUType: "A100-80GB", Profile: "full", UUSDPerHour: 1, EffectiveFrom: now.Add(time.Minute)}, "effective_from", nil},
		{"bad profile", admin, billing.Rate{GPUType: "A100-80GB", Profile: "half", UUSDPerHour: 1, EffectiveFrom: now.Add(time.Hour)}, "profile", nil},
		{"negative", admin, billing.Rate{GPUType: "A100-80GB", Profile: "full", UUSDPerHour: -1, EffectiveFrom: now.Add(time.Hour)}, "uusd_per_hour", nil},
		{"repeat", admin, billing.Rate{GPUType: "A100-80GB", Profile: "full", UUSDPerHour: 1, EffectiveFrom: at}, "", db.ErrConflict},
		{"finance", &auth.Principal{Name: "fin@example.com", PlatformRole: auth.RoleFinance},
			billing.Rate{GPUType: "A100-80GB", Profile: "full", UUSDPerHour: 1, EffectiveFrom: now.Add(time.Hour)}, "", auth.ErrForbidden},
		{"team admin", &auth.Principal{Name: "a", Teams: []auth.Membership{{TeamID: 1, Team: "risk", Role: auth.RoleAdmin}}},
			billing.Rate{GPUType: "A100-80GB", Profile: "full", UUSDPerHour: 1, EffectiveFrom: now.Add(time.Hour)}, "", auth.ErrForbidden},
	} {
		_, err := book.Create(ctx, tc.p, tc.r)
		if tc.want != nil {
			if !errors.Is(err, tc.want) {
				t.Errorf("%s: err = %v, want %v", tc.name, err, tc.want)
			}
			continue
		}
		var verrs field.Errors
		if !errors.As(err, &verrs) || len(verrs) != 1 || verrs[0].Field != tc.field {
			t.Errorf("%s: err = %v, want a validation error on %s", tc.name, err, tc.field)
		}
	}
	list, err := book.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(list); n != 14 {
		t.Errorf("history has %d rates, want the 13 defaults (12 GPU, 1 cpu-core) and the new one", n)
	}
}
