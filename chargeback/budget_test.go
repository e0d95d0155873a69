package chargeback_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"modelplane/auth"
	"modelplane/busapi"
	"modelplane/chargeback"
	"modelplane/db"
	"modelplane/internal/chtest"
	"modelplane/internal/eventtest"
	"modelplane/internal/pgtest"
	"modelplane/tenant"
)

// TestBudgets: a team admin sets a $10 budget (a viewer may not, another
// team's admin finds no team); at $8.50 spent half-way through the month the
// forecast is the run rate to month end and one 80 percent alert is stored,
// audited and published on mp.events.risk, once however often Check runs;
// at $10 the 100 percent alert follows, and a blocking budget then blocks.
func TestBudgets(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.New(t)
	ch := chtest.New(t)
	sys := &auth.Principal{Name: "seed", PlatformRole: auth.RolePlatformAdmin}
	ten := tenant.New(pool, nil)
	risk, err := ten.CreateTeam(ctx, sys, "risk", "Risk")
	if err != nil {
		t.Fatal(err)
	}
	search, err := ten.CreateTeam(ctx, sys, "search", "Search")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 10, 16, 12, 0, 0, 0, time.UTC) // 15.5 of 31 days: half the month
	clk := clockAt(t, now)
	svc := chargeback.New(ch, db.New(pool), clk)
	budgets := chargeback.NewBudgets(pool, svc, nil, nil, clk)
	events := eventtest.New(t, pool, busapi.EventsSubject("risk"))

	riskAdmin := &auth.Principal{Name: "ra", Teams: []auth.Membership{{TeamID: risk.ID, Team: "risk", Role: auth.RoleAdmin}}}
	riskViewer := &auth.Principal{Name: "rv", Teams: []auth.Membership{{TeamID: risk.ID, Team: "risk", Role: auth.RoleViewer}}}
	searchAdmin := &auth.Principal{Name: "sa", Teams: []auth.Membership{{TeamID: search.ID, Team: "search", Role: auth.RoleAdmin}}}
	spec := chargeback.BudgetSpec{Team: "risk", MonthlyUUSD: 10_000_000}
	if _, err := budgets.Set(ctx, riskViewer, spec); !errors.Is(err, auth.ErrForbidden) {
		t.Errorf("viewer Set: %v, want ErrForbidden", err)
	}
	if _, err := budgets.Set(ctx, searchAdmin, spec); !errors.Is(err, db.ErrNotFound) {
		t.Errorf("other team's admin Set: %v, want ErrNotFound", err)
	}
	if _, err := budgets.Set(ctx, riskAdmin, chargeback.BudgetSpec{Team: "risk", MonthlyUUSD: 1, Enforcement: "shout"}); err == nil {
		t.Error("bad enforcement accepted")
	}
	if _, err := budgets.Set(ctx, riskAdmin, spec); err != nil {
		t.Fatal(err)
	}
	// $8.50: 8,500 s at $3.60/h in October.
	var rows []rec
	for i := range 8500 {
		rows = append(rows, rec{ts: t0.Add(time.Duration(i) * time.Second), node: "n1", gpuType: "A100-80GB", profile: "full", team: "risk",
			endpoint: "fraud", model: "m", ver: "v1", rate: 3_600_000})
	}
	insert(t, ch, rows)
	for range 3 {
		if err := budgets.Check(ctx); err != nil {
			t.Fatal(err)
		}
	}
	list, err := budgets.List(ctx, riskViewer)
	if err != nil {
		t.Fatal(err)
	}
	// Forecast: 8.5 $ over 15.5 days → 17 $ over 31.
	if len(list) != 1 || list[0].SpentUUSD != 8_500_000 || list[0].ForecastUUSD != 17_000_000 || list[0].SpentPct != 85 {
		t.Fatalf("List = %+v, want spent 8,500,000, forecast 17,000,000, 85%%", list)
	}
	if l, err := budgets.List(ctx, searchAdmin); err != nil || len(l) != 0 {
		t.Errorf("search admin sees %+v, %v; want no budgets", l, err)
	}
	evs := events.Next(t)
	if len(evs) != 1 {
		t.Fatalf("events on mp.events.risk = %+v, want the 80 percent alert once", evs)
	}
	if ev := evs[0]; ev.Kind != chargeback.EventKind || ev.Type != "alert" || ev.State != "80" || ev.Name != "risk" ||
		!strings.Contains(ev.Message, "spent $8.50 of its $10.00") || !ev.At.Equal(now) {
		t.Errorf("event = %+v, want the 80 percent alert of risk at %s", ev, now)
	}
	var audited int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM audit_log WHERE action = 'budget.alert_80'`).Scan(&audited); err != nil || audited != 1 {
		t.Errorf("audit rows for the 80 percent alert = %d, %v; want 1", audited, err)
	}
	if blocked := blockingTeams(t, pool, now); blocked[risk.ID] {
		t.Errorf("BudgetBlockingList under an alert-only budget blocks risk: %v", blocked)
	}
	// Up to $10 and switch the budget to blocking.
	insert(t, ch, []rec{{ts: t0.Add(24 * time.Hour), node: "n1", gpuType: "A100-80GB", profile: "full", team: "risk", rate: 5_400_000_000}})
	spec.Enforcement = chargeback.EnforceBlock
	if _, err := budgets.Set(ctx, riskAdmin, spec); err != nil {
		t.Fatal(err)
	}
	if err := budgets.Check(ctx); err != nil {
		t.Fatal(err)
	}
	if evs := events.Next(t); len(evs) != 1 || evs[0].State != "100" || !strings.Contains(evs[0].Message, "no new replicas") {
		t.Errorf("events after $10 = %+v, want the 100 percent alert of a blocking budget", evs)
	}
	alerts, err := budgets.Alerts(ctx, riskViewer)
	if err != nil {
		t.Fatal(err)
	}
	if len(alerts) != 2 || alerts[0].ThresholdPct+alerts[1].ThresholdPct != 180 {
		t.Errorf("alerts = %+v, want 80 and 100", alerts)
	}
	if blocked := blockingTeams(t, pool, now); !blocked[risk.ID] || blocked[search.ID] {
		t.Errorf("BudgetBlockingList at 100%% of risk's blocking budget = %v, want risk (%d) blocked and search (%d) not", blocked, risk.ID, search.ID)
	}
	// Raised to $12: the alerts measured against $10 are void, the block
	// lifts, and the 80 percent alert fires again against the new amount.
	spec.MonthlyUUSD = 12_000_000
	if _, err := budgets.Set(ctx, riskAdmin, spec); err != nil {
		t.Fatal(err)
	}
	if blocked := blockingTeams(t, pool, now); blocked[risk.ID] {
		t.Errorf("BudgetBlockingList after raising the budget blocks risk: %v", blocked)
	}
	if err := budgets.Check(ctx); err != nil {
		t.Fatal(err)
	}
	if evs := events.Next(t); len(evs) != 1 || evs[0].State != "80" || !strings.Contains(evs[0].Message, "of its $12.00") {
		t.Errorf("events after raising to $12 = %+v, want the 80 percent alert against $12", evs)
	}
	// Setting the same amount again keeps the month's alerts.
	if _, err := budgets.Set(ctx, riskAdmin, spec); err != nil {
		t.Fatal(err)
	}
	if alerts, err := budgets.Alerts(ctx, riskViewer); err != nil || len(alerts) != 1 || alerts[0].BudgetUUSD != 12_000_000 {
		t.Errorf("alerts after an unchanged Set = %+v, %v; want the 80 percent alert against $12", alerts, err)
	}
	// An endpoint's budget is measured on its own row of the month's one
	// report: fraud's $8.50, while the team's holds the $1.50 of no
	// endpoint too.
	var model int64
	if err := pool.QueryRow(ctx, `INSERT INTO models (team_id, name, task, feature_names) VALUES ($1, 'm', 'classification', '{a}') RETURNING id`,
		risk.ID).Scan(&model); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO endpoints (team_id, name, model_id, runtime, instance_profile, min_replicas, max_replicas, tier)
		VALUES ($1, 'fraud', $2, 'onnxruntime', 'full', 1, 2, 'standard')`, risk.ID, model); err != nil {
		t.Fatal(err)
	}
	if _, err := budgets.Set(ctx, riskAdmin, chargeback.BudgetSpec{Team: "risk", Endpoint: "fraud", MonthlyUUSD: 1_000_000_000}); err != nil {
		t.Fatal(err)
	}
	list, err = budgets.List(ctx, riskViewer)
	if err != nil {
		t.Fatal(err)
	}
	spent := map[string]int64{}
	for _, bu := range list {
		spent[chargeback.BudgetName(bu.Team, bu.Endpoint)] = bu.SpentUUSD
	}
	if len(list) != 2 || spent["risk"] != 10_000_000 || spent["risk/fraud"] != 8_500_000 {
		t.Errorf("spent = %v, want risk 10,000,000 and risk/fraud 8,500,000", spent)
	}
}

// blockingTeams returns the teams whose whole-team budget blocks new
// replicas in the month of now, read through BudgetBlockingList: the query
// the fleet reconciler places by, so this test fails when its rule does.
func blockingTeams(t *testing.T, pool *pgxpool.Pool, now time.Time) map[int64]bool {
	t.Helper()
	month, _ := chargeback.Month(now)
	rows, err := db.New(pool).BudgetBlockingList(t.Context(), pgtype.Date{Time: month, Valid: true})
	if err != nil {
		t.Fatal(err)
	}
	out := map[int64]bool{}
	for _, r := range rows {
		if r.EndpointID == nil {
			out[r.TeamID] = true
		}
	}
	return out
}

func TestForecast(t *testing.T) {
	t.Parallel()
	day := 24 * time.Hour
	for _, tc := range []struct {
		spent          int64
		elapsed, month time.Duration
		want           int64
	}{
		{1_000_000, 10 * day, 30 * day, 3_000_000},
		{1, 2 * time.Second, 3 * time.Second, 2}, // 1.5 rounds half up
		{5, 0, 30 * day, 5},
		// $10M in the first 10 days of a 30-day month: the product with
		// the month's seconds passes int64, the forecast does not.
		{10_000_000_000_000, 10 * day, 30 * day, 30_000_000_000_000},
		{10_000_000_000_001, 2 * time.Second, 3 * time.Second, 15_000_000_000_002}, // 15,000,000,000,001.5 rounds half up
	} {
		if got := chargeback.Forecast(tc.spent, tc.elapsed, tc.month); got != tc.want {
			t.Errorf("Forecast(%d, %s, %s) = %d, want %d", tc.spent, tc.elapsed, tc.month, got, tc.want)
		}
	}
}
