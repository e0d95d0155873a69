package fleet_test

import (
	"encoding/json"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"modelplane/auth"
	"modelplane/busapi"
	"modelplane/chargeback"
	"modelplane/db"
	"modelplane/endpoint"
	"modelplane/fleet"
	"modelplane/internal/natstest"
	"modelplane/internal/wait"
)

// wake records a wake request as the intake does and returns whether the
// endpoint was asleep.
func (f *fixture) wake(t *testing.T, name string) bool {
	t.Helper()
	asleep, err := f.fleet.Wake(t.Context(), name)
	if err != nil {
		t.Fatal(err)
	}
	return asleep
}

// TestWokenEndpointGetsAReplicaAndSleepsAfterTheGrace: an endpoint with
// min_replicas 0 stays at zero until woken, then gets one replica that turns
// ready and is routed; wakes within the grace keep it, and a grace without
// any wake takes it back to zero.
func TestWokenEndpointGetsAReplicaAndSleepsAfterTheGrace(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	grace := 5 * time.Minute
	f.fleet = fleet.New(f.pool, fleet.Options{Clock: f.clock, WakeGrace: grace})
	inv := gpus(0, 1, "A100-80GB", seven1g())
	f.heartbeat(t, "node-a", inv)
	f.endpoint(t, "sleepy", "fraud", "v1", "mig-1g.10gb", "batch", 0)

	if p := f.reconcile(t); p.Placed != 0 {
		t.Fatalf("pass before any wake = %+v, want nothing placed", p)
	}
	if e := f.get(t, "sleepy"); e.Status != fleet.StatusScaledToZero {
		t.Fatalf("status = %s, want %s", e.Status, fleet.StatusScaledToZero)
	}
	if f.wake(t, "no-such-endpoint") {
		t.Error("waking an unknown endpoint reported asleep")
	}

	if !f.wake(t, "sleepy") {
		t.Fatal("first wake: asleep = false, want true")
	}
	f.clock.Advance(time.Second)
	if f.wake(t, "sleepy") {
		t.Fatal("second wake within the grace: asleep = true, want false (it only extends the grace)")
	}
	if p := f.reconcile(t); p.Placed != 1 {
		t.Fatalf("pass after the wake = %+v, want one replica placed", p)
	}
	if e := f.get(t, "sleepy"); e.Status != fleet.StatusStarting {
		t.Fatalf("status after the wake = %s, want %s", e.Status, fleet.StatusStarting)
	}
	d := f.desired(t, "node-a")
	if len(d.Replicas) != 1 || d.Replicas[0].Endpoint != "sleepy" {
		t.Fatalf("desired = %+v, want one replica of sleepy", d)
	}
	f.heartbeat(t, "node-a", inv, ready(d)...)
	f.reconcile(t)
	if e := f.get(t, "sleepy"); e.Status != fleet.StatusReady {
		t.Fatalf("status with the replica ready = %s, want %s", e.Status, fleet.StatusReady)
	}
	rt, _ := f.route(t, "sleepy")
	if len(rt.Versions) != 1 || len(rt.Versions[0].Replicas) != 1 || !rt.ScaledToZero {
		t.Fatalf("route = %+v, want the ready replica and scaled_to_zero still set (min_replicas 0)", rt)
	}

	// Traffic keeps it: a wake just before the grace ends starts a new one.
	f.clock.Advance(grace - 2*time.Second)
	if f.wake(t, "sleepy") {
		t.Fatal("wake within the grace reported asleep")
	}
	f.clock.Advance(grace - time.Second)
	f.heartbeat(t, "node-a", inv, ready(d)...)
	if p := f.reconcile(t); p.Removed != 0 {
		t.Fatalf("pass within the extended grace = %+v, want nothing removed", p)
	}

	// A whole grace without a wake: back to zero.
	f.clock.Advance(2 * time.Second)
	f.heartbeat(t, "node-a", inv, ready(d)...)
	if p := f.reconcile(t); p.Removed != 1 || len(p.LostNodes) != 0 {
		t.Fatalf("pass after the grace = %+v, want the replica removed", p)
	}
	if e := f.get(t, "sleepy"); e.Status != fleet.StatusScaledToZero {
		t.Fatalf("status after the grace = %s, want %s", e.Status, fleet.StatusScaledToZero)
	}
	if d := f.desired(t, "node-a"); len(d.Replicas) != 0 {
		t.Fatalf("desired after the grace = %+v, want none", d)
	}
	rt, _ = f.route(t, "sleepy")
	if len(rt.Versions[0].Replicas) != 0 {
		t.Fatalf("route after the grace = %+v, want no replica", rt)
	}
	if !f.wake(t, "sleepy") {
		t.Error("wake after the grace: asleep = false, want true")
	}
}

// TestWokenEndpointKeepsItsMinimum: a wake never lowers what min_replicas
// asks for, and an endpoint with a minimum is never taken below it.
func TestWokenEndpointKeepsItsMinimum(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	inv := gpus(0, 1, "A100-80GB", seven1g())
	f.heartbeat(t, "node-a", inv)
	f.endpoint(t, "steady", "fraud", "v1", "mig-1g.10gb", "batch", 2)
	f.wake(t, "steady")
	if p := f.reconcile(t); p.Placed != 2 {
		t.Fatalf("pass = %+v, want min_replicas 2 placed", p)
	}
	f.clock.Advance(time.Hour)
	f.heartbeat(t, "node-a", inv)
	if p := f.reconcile(t); p.Removed != 0 {
		t.Fatalf("pass after the grace = %+v, want the minimum kept", p)
	}
}

// TestIntakeRecordsWakeRequests: a wake request on NATS is recorded and
// wakes the reconciler; a malformed one is ignored.
func TestIntakeRecordsWakeRequests(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.endpoint(t, "sleepy", "fraud", "v1", "mig-1g.10gb", "batch", 0)
	_, nc := natstest.Connect(t)
	var dirty atomic.Int32
	in := fleet.NewIntake(f.fleet, nc, slog.New(slog.DiscardHandler), func() { dirty.Add(1) })
	if err := in.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(in.Stop)
	// A body naming another endpoint than its subject is refused.
	bad, _ := json.Marshal(busapi.Wake{Endpoint: "other", Gateway: "gw-1"})
	if err := nc.Publish(busapi.WakeSubject("sleepy"), bad); err != nil {
		t.Fatal(err)
	}
	good, _ := json.Marshal(busapi.Wake{Endpoint: "sleepy", Gateway: "gw-1", At: f.clock.Now()})
	if err := nc.Publish(busapi.WakeSubject("sleepy"), good); err != nil {
		t.Fatal(err)
	}
	wait.Eventually(t, 10*time.Second, func() bool { return dirty.Load() != 0 }, "the reconciler was never woken")
	if dirty.Load() != 1 {
		t.Fatalf("reconciler woken %d times, want 1", dirty.Load())
	}
	var woken *time.Time
	if err := f.pool.QueryRow(t.Context(), "SELECT woken_at FROM endpoints WHERE name = 'sleepy'").Scan(&woken); err != nil {
		t.Fatal(err)
	}
	if woken == nil || !woken.Equal(f.clock.Now()) {
		t.Fatalf("woken_at = %v, want %v", woken, f.clock.Now())
	}
	if p := f.reconcile(t); p.Unplaced != 1 {
		t.Fatalf("pass = %+v, want the woken endpoint's replica wanted (no node: unplaced)", p)
	}
}

// block stores a budget with the given enforcement for the team (endpoint
// "") or one endpoint, at 100 percent this month when reached.
func (f *fixture) block(t *testing.T, endpoint, enforcement string, reached bool) {
	t.Helper()
	ctx := t.Context()
	var teamID int64
	if err := f.pool.QueryRow(ctx, "SELECT id FROM teams WHERE name = 'risk'").Scan(&teamID); err != nil {
		t.Fatal(err)
	}
	var budgetID int64
	err := f.pool.QueryRow(ctx, `INSERT INTO budgets (team_id, endpoint_id, monthly_uusd, enforcement)
		VALUES ($1, (SELECT id FROM endpoints WHERE name = $2), 10000000, $3) RETURNING id`, teamID, endpoint, enforcement).Scan(&budgetID)
	if err != nil {
		t.Fatal(err)
	}
	if !reached {
		return
	}
	month := time.Date(f.clock.Now().Year(), f.clock.Now().Month(), 1, 0, 0, 0, 0, time.UTC)
	if _, err := db.New(f.pool).BudgetAlertInsert(ctx, db.BudgetAlertInsertParams{BudgetID: budgetID, TeamID: teamID,
		Month: pgtype.Date{Time: month, Valid: true}, ThresholdPct: 100, SpentUusd: 10_250_000, BudgetUusd: 10_000_000, ForecastUusd: 11_000_000}); err != nil {
		t.Fatal(err)
	}
}

// TestBlockingBudgetHoldsReplicasAtTheMinimum: a budget with block
// enforcement at 100 percent (the team's or the endpoint's own) keeps a
// woken endpoint at zero and says why; a budget that only alerts, one that
// has not been reached, or another endpoint's does not; replicas already
// running beyond the minimum are not stopped.
func TestBlockingBudgetHoldsReplicasAtTheMinimum(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		endpoint    string // budget's endpoint, "" for the team's
		enforcement string
		reached     bool
		blocked     bool
	}{
		{"team budget blocks", "", "block", true, true},
		{"endpoint budget blocks", "sleepy", "block", true, true},
		{"alert only", "", "alert", true, false},
		{"not reached", "", "block", false, false},
		{"another endpoint's budget", "other", "block", true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			f.heartbeat(t, "node-a", gpus(0, 1, "A100-80GB", seven1g()))
			f.endpoint(t, "sleepy", "fraud", "v1", "mig-1g.10gb", "batch", 0)
			f.endpoint(t, "other", "fraud", "v1", "mig-1g.10gb", "batch", 0)
			f.block(t, tt.endpoint, tt.enforcement, tt.reached)
			f.wake(t, "sleepy")
			p := f.reconcile(t)
			e := f.get(t, "sleepy")
			if tt.blocked {
				if p.Placed != 0 || e.Status != fleet.StatusScaledToZero || !strings.HasPrefix(e.PlacementError, "budget exceeded: ") ||
					!strings.Contains(e.PlacementError, "$10.25 of its $10.00") {
					t.Fatalf("blocked: placed %d, status %s, placement_error %q; want none, %s and the budget named",
						p.Placed, e.Status, e.PlacementError, fleet.StatusScaledToZero)
				}
				return
			}
			if p.Placed != 1 || e.PlacementError != "" {
				t.Fatalf("not blocked: placed %d, placement_error %q; want the woken replica and no error", p.Placed, e.PlacementError)
			}
		})
	}
}

// TestBlockingBudgetKeepsRunningReplicas: a budget reaching 100 percent
// while a woken replica runs keeps it (no new one is started), and after
// the grace the endpoint goes to zero and stays there.
func TestBlockingBudgetKeepsRunningReplicas(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	inv := gpus(0, 1, "A100-80GB", seven1g())
	f.heartbeat(t, "node-a", inv)
	f.endpoint(t, "sleepy", "fraud", "v1", "mig-1g.10gb", "batch", 0)
	f.wake(t, "sleepy")
	if p := f.reconcile(t); p.Placed != 1 {
		t.Fatalf("pass = %+v, want the woken replica", p)
	}
	d := f.desired(t, "node-a")
	f.heartbeat(t, "node-a", inv, ready(d)...)
	f.block(t, "", "block", true)
	if p := f.reconcile(t); p.Removed != 0 || p.Placed != 0 {
		t.Fatalf("pass with the budget reached = %+v, want the running replica kept", p)
	}
	if e := f.get(t, "sleepy"); e.Status != fleet.StatusReady || e.PlacementError != "" {
		t.Fatalf("endpoint = %s %q, want ready without a note (nothing held back)", e.Status, e.PlacementError)
	}
	f.clock.Advance(fleet.DefaultWakeGrace)
	f.heartbeat(t, "node-a", inv, ready(d)...)
	if p := f.reconcile(t); p.Removed != 1 || len(p.LostNodes) != 0 {
		t.Fatalf("pass after the grace = %+v, want the replica removed", p)
	}
	f.wake(t, "sleepy")
	if p := f.reconcile(t); p.Placed != 0 {
		t.Fatalf("pass after a new wake = %+v, want nothing placed (budget blocks)", p)
	}
	if e := f.get(t, "sleepy"); !strings.HasPrefix(e.PlacementError, "budget exceeded: team risk spent") {
		t.Fatalf("placement_error = %q, want the team budget named", e.PlacementError)
	}
}

// TestRaisedBudgetLiftsTheBlock: a blocking budget at 100 percent holds a
// woken endpoint at zero; raising the budget through chargeback (the API's
// path) voids the month's alerts measured against the old amount, so the
// next pass places the woken replica and no note remains. The routing entry
// carries the block's reason for the gateways while it holds, and drops it
// after.
func TestRaisedBudgetLiftsTheBlock(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.heartbeat(t, "node-a", gpus(0, 1, "A100-80GB", seven1g()))
	f.endpoint(t, "sleepy", "fraud", "v1", "mig-1g.10gb", "batch", 0)
	f.block(t, "", "block", true)
	f.wake(t, "sleepy")
	if p := f.reconcile(t); p.Placed != 0 {
		t.Fatalf("pass with the budget reached = %+v, want nothing placed", p)
	}
	if rt, ok := f.route(t, "sleepy"); !ok || !rt.ScaledToZero || !strings.HasPrefix(rt.Blocked, "budget exceeded: team risk spent $10.25 of its $10.00") {
		t.Fatalf("route while blocked = %+v (written %v), want scaled to zero with the budget named in blocked", rt, ok)
	}
	admin := &auth.Principal{Name: "pa", PlatformRole: auth.RolePlatformAdmin}
	budgets := chargeback.NewBudgets(f.pool, nil, nil, nil, f.clock)
	if _, err := budgets.Set(t.Context(), admin, chargeback.BudgetSpec{Team: "risk", MonthlyUUSD: 20_000_000, Enforcement: chargeback.EnforceBlock}); err != nil {
		t.Fatal(err)
	}
	if p := f.reconcile(t); p.Placed != 1 {
		t.Fatalf("pass after raising the budget = %+v, want the woken replica placed", p)
	}
	if e := f.get(t, "sleepy"); e.PlacementError != "" {
		t.Errorf("placement_error = %q after raising the budget, want none", e.PlacementError)
	}
	if rt, ok := f.route(t, "sleepy"); !ok || rt.Blocked != "" {
		t.Errorf("route after raising the budget = %+v (written %v), want blocked empty", rt, ok)
	}
}

// TestWakeStartsOnlyVersionsCallersReach: a wake starts a replica of each
// version with weight above 0 and of each experiment arm; a shadow (its
// replies are discarded) and a version kept at weight 0 stay at zero.
func TestWakeStartsOnlyVersionsCallersReach(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.heartbeat(t, "node-a", gpus(0, 1, "A100-80GB", seven1g()))
	f.endpoint(t, "sleepy", "fraud", "v1", "mig-1g.10gb", "batch", 0)
	versions := func() []string {
		t.Helper()
		var out []string
		for _, r := range f.desired(t, "node-a").Replicas {
			out = append(out, r.Version)
		}
		slices.Sort(out)
		return out
	}
	if _, err := f.eps.SetTraffic(t.Context(), f.eng, "sleepy", []endpoint.Weight{{Version: "v1", Weight: 100}, {Version: "v2", ShadowPercent: 20}}); err != nil {
		t.Fatal(err)
	}
	f.wake(t, "sleepy")
	if p := f.reconcile(t); p.Placed != 1 {
		t.Fatalf("pass with a shadow = %+v, want one replica placed", p)
	}
	if got := versions(); !slices.Equal(got, []string{"v1"}) {
		t.Fatalf("replicas of versions %v with v2 a shadow, want [v1]", got)
	}
	if _, err := f.eps.SetTraffic(t.Context(), f.eng, "sleepy", []endpoint.Weight{{Version: "v1", Weight: 100}, {Version: "v2"}}); err != nil {
		t.Fatal(err)
	}
	if p := f.reconcile(t); p.Placed != 0 {
		t.Fatalf("pass with v2 at weight 0 = %+v, want nothing placed", p)
	}
	if _, err := f.eps.SetExperiment(t.Context(), f.eng, "sleepy", endpoint.Experiment{Name: "ab",
		Arms: []endpoint.Arm{{Version: "v1", Share: 50}, {Version: "v2", Share: 50}}}); err != nil {
		t.Fatal(err)
	}
	if p := f.reconcile(t); p.Placed != 1 {
		t.Fatalf("pass with v2 an experiment arm = %+v, want its replica placed", p)
	}
	if got := versions(); !slices.Equal(got, []string{"v1", "v2"}) {
		t.Fatalf("replicas of versions %v with v2 an arm, want [v1 v2]", got)
	}
}
