package fleet_test

import (
	"errors"
	"strings"
	"testing"

	"modelplane/endpoint"
	"modelplane/field"
	"modelplane/fleet"
	"modelplane/quota"
)

// replicasOf counts an endpoint's replicas.
func (f *fixture) replicasOf(t *testing.T, endpoint string) int {
	t.Helper()
	var n int
	if err := f.pool.QueryRow(t.Context(), `SELECT count(*) FROM replicas r JOIN endpoints e ON e.id = r.endpoint_id
		WHERE e.name = $1`, endpoint).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func (f *fixture) setQuota(t *testing.T, resource string, amount float64) {
	t.Helper()
	if _, err := f.quotas.Set(t.Context(), f.root, "risk", resource, amount); err != nil {
		t.Fatalf("set quota %s %v: %v", resource, amount, err)
	}
}

// TestQuotaCapsTeamAndSaysWhy: a team with a quota of 2 A100s gets 2 of
// the 3 whole-GPU replicas its endpoint wants, on a node with 4 free; the
// endpoint says which quota holds the third back, and raising the quota
// places it.
func TestQuotaCapsTeamAndSaysWhy(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.heartbeat(t, "node-a", gpus(0, 4, "A100-80GB", nil))
	f.setQuota(t, "A100-80GB", 2)
	f.endpoint(t, "fraud-ep", "fraud", "v1", "gpu-a100-80gb", "standard", 3)
	f.reconcile(t)
	if got := f.replicasOf(t, "fraud-ep"); got != 2 {
		t.Fatalf("replicas under a quota of 2 A100s = %d, want 2", got)
	}
	e := f.get(t, "fraud-ep")
	if want := "v1: quota: team risk holds 2 of 2 A100-80GB GPUs"; !strings.Contains(e.PlacementError, want) {
		t.Errorf("placement_error = %q, want it to contain %q", e.PlacementError, want)
	}
	if e.Status == fleet.StatusReady {
		t.Errorf("status = %q with a replica held back", e.Status)
	}
	f.setQuota(t, "A100-80GB", 3)
	f.reconcile(t)
	if got := f.replicasOf(t, "fraud-ep"); got != 3 {
		t.Errorf("replicas after raising the quota to 3 = %d, want 3", got)
	}
	if e := f.get(t, "fraud-ep"); e.PlacementError != "" {
		t.Errorf("placement_error after raising the quota = %q, want none", e.PlacementError)
	}
}

// TestQuotaBelowMinimumsIsRefusedNamingEndpoints: minimums are promised,
// so a quota below what they hold is a 400 on amount naming each endpoint
// and what its minimum holds; one at exactly that is accepted; only a
// platform admin sets quotas.
func TestQuotaBelowMinimumsIsRefusedNamingEndpoints(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.heartbeat(t, "node-a", gpus(0, 4, "A100-80GB", nil))
	f.endpoint(t, "fraud-ep", "fraud", "v1", "gpu-a100-80gb", "standard", 2)
	f.endpoint(t, "fraud-b", "fraud", "v2", "gpu-a100-80gb", "batch", 1)
	f.reconcile(t)
	_, err := f.quotas.Set(t.Context(), f.root, "risk", "A100-80GB", 2)
	var verrs field.Errors
	if !errors.As(err, &verrs) || len(verrs) != 1 || verrs[0].Field != "amount" {
		t.Fatalf("quota 2 below minimums holding 3: err = %v, want a validation error on amount", err)
	}
	for _, want := range []string{"3 A100-80GB GPU equivalents", "fraud-b (1)", "fraud-ep (2)"} {
		if !strings.Contains(verrs[0].Message, want) {
			t.Errorf("refusal %q does not say %q", verrs[0].Message, want)
		}
	}
	f.setQuota(t, "A100-80GB", 3)
	if _, err := f.quotas.Set(t.Context(), f.eng, "risk", "A100-80GB", 8); err == nil {
		t.Error("a team admin set a quota; want forbidden")
	}
	for _, c := range []struct {
		resource string
		amount   float64
		field    string
	}{{"A100 80GB", 1, "resource"}, {"A100-80GB", -1, "amount"}, {quota.CPUResource, 1.5, "amount"}} {
		_, err := f.quotas.Set(t.Context(), f.root, "risk", c.resource, c.amount)
		var ve field.Errors
		if !errors.As(err, &ve) || ve[0].Field != c.field {
			t.Errorf("SetQuota(%q, %v) = %v, want a validation error on %s", c.resource, c.amount, err, c.field)
		}
	}
	qs, err := f.quotas.List(t.Context(), f.eng)
	if err != nil || len(qs) != 1 || qs[0].Amount != 3 || qs[0].UpdatedBy != "root@example.com" {
		t.Errorf("quotas seen by the team = %+v, %v; want the one of 3 set by root", qs, err)
	}
	var audited int
	if err := f.pool.QueryRow(t.Context(), `SELECT count(*) FROM audit_log WHERE action = 'quota.set'`).Scan(&audited); err != nil || audited != 1 {
		t.Errorf("quota.set audit rows = %d (%v), want 1", audited, err)
	}
}

// TestQuotaCountsMIGSlicesAsFractions: a 1g.10gb slice of an A100 is 1/7
// of a GPU, so a quota of 3/7 A100 holds 3 of 5 wanted replicas, and the
// refusal below minimums counts the same way.
func TestQuotaCountsMIGSlicesAsFractions(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.heartbeat(t, "node-a", gpus(0, 1, "A100-80GB", seven1g()))
	f.setQuota(t, "A100-80GB", 3.0/7)
	f.endpoint(t, "fraud-ep", "fraud", "v1", "mig-1g.10gb", "standard", 5)
	f.reconcile(t)
	if got := f.replicasOf(t, "fraud-ep"); got != 3 {
		t.Fatalf("1g.10gb replicas under a quota of 3/7 A100 = %d, want 3", got)
	}
	if e := f.get(t, "fraud-ep"); !strings.Contains(e.PlacementError, "quota: team risk holds 0.43 of 0.43 A100-80GB GPUs") {
		t.Errorf("placement_error = %q, want the quota in GPU equivalents", e.PlacementError)
	}
	_, err := f.quotas.Set(t.Context(), f.root, "risk", "A100-80GB", 2.0/7)
	var verrs field.Errors
	if !errors.As(err, &verrs) || !strings.Contains(verrs[0].Message, "fraud-ep (0.43)") {
		t.Errorf("quota of 2/7 under minimums holding 3/7: %v, want a refusal naming fraud-ep (0.43)", err)
	}
}

// TestCriticalPreemptsBatchBeyondItsMinimumOnly: on a full node a critical
// endpoint takes the GPU of a batch replica beyond its minimum (a woken
// min_replicas 0 endpoint), never the one a batch minimum holds; the
// preempted endpoint says who took it, and a second critical endpoint finds
// nothing more to take.
func TestCriticalPreemptsBatchBeyondItsMinimumOnly(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.heartbeat(t, "node-a", gpus(0, 2, "A100-80GB", nil))
	f.endpoint(t, "crunch", "fraud", "v1", "gpu-a100-80gb", "batch", 1)
	f.endpoint(t, "nightly", "fraud", "v2", "gpu-a100-80gb", "batch", 0)
	f.wake(t, "nightly")
	f.reconcile(t)
	if f.replicasOf(t, "crunch") != 1 || f.replicasOf(t, "nightly") != 1 {
		t.Fatalf("batch replicas = %d, %d; want 1 each", f.replicasOf(t, "crunch"), f.replicasOf(t, "nightly"))
	}
	f.endpoint(t, "pay", "fraud", "v1", "gpu-a100-80gb", "critical", 1)
	p := f.reconcile(t)
	if p.Preempted != 1 {
		t.Errorf("pass preempted %d replicas, want 1", p.Preempted)
	}
	if f.replicasOf(t, "pay") != 1 || f.replicasOf(t, "nightly") != 0 || f.replicasOf(t, "crunch") != 1 {
		t.Fatalf("after preemption pay, nightly, crunch = %d, %d, %d; want 1, 0, 1",
			f.replicasOf(t, "pay"), f.replicasOf(t, "nightly"), f.replicasOf(t, "crunch"))
	}
	// The next pass keeps it so and the note stays while nightly is short.
	f.reconcile(t)
	e := f.get(t, "nightly")
	if !strings.Contains(e.PlacementError, "preempted by critical endpoint pay") {
		t.Errorf("nightly placement_error = %q, want it to name the critical endpoint", e.PlacementError)
	}
	if f.replicasOf(t, "pay") != 1 || f.replicasOf(t, "nightly") != 0 {
		t.Errorf("second pass moved replicas back: pay %d, nightly %d", f.replicasOf(t, "pay"), f.replicasOf(t, "nightly"))
	}
	f.endpoint(t, "pay2", "fraud", "v2", "gpu-a100-80gb", "critical", 1)
	if p := f.reconcile(t); p.Preempted != 0 {
		t.Errorf("a batch minimum was preempted (%d replicas)", p.Preempted)
	}
	if f.replicasOf(t, "crunch") != 1 || f.replicasOf(t, "pay2") != 0 {
		t.Errorf("crunch %d, pay2 %d; want crunch kept at its minimum", f.replicasOf(t, "crunch"), f.replicasOf(t, "pay2"))
	}
	if e := f.get(t, "pay2"); !strings.Contains(e.PlacementError, "no free whole GPU on an A100-80GB") {
		t.Errorf("pay2 placement_error = %q, want no free A100", e.PlacementError)
	}
}

// TestPreemptionKeepsTiersApart: a batch replica on one 1g slice of a MIG
// GPU keeps the other six from a critical endpoint; preemption empties the
// GPU first, so afterwards every slice held on it is the critical tier's.
func TestPreemptionKeepsTiersApart(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.heartbeat(t, "node-a", gpus(0, 1, "A100-80GB", seven1g()))
	f.endpoint(t, "nightly", "fraud", "v2", "mig-1g.10gb", "batch", 0)
	f.wake(t, "nightly")
	f.reconcile(t)
	f.endpoint(t, "pay", "fraud", "v1", "mig-1g.10gb", "critical", 2)
	f.reconcile(t)
	if f.replicasOf(t, "pay") != 2 || f.replicasOf(t, "nightly") != 0 {
		t.Fatalf("pay %d, nightly %d; want 2, 0", f.replicasOf(t, "pay"), f.replicasOf(t, "nightly"))
	}
	var tiers int
	if err := f.pool.QueryRow(t.Context(), `SELECT count(DISTINCT e.tier) FROM allocations a
		JOIN replicas r ON r.id = a.replica_id JOIN endpoints e ON e.id = r.endpoint_id`).Scan(&tiers); err != nil || tiers != 1 {
		t.Errorf("tiers sharing the GPU = %d (%v), want 1", tiers, err)
	}
}

// TestLoweredQuotaStopsReplicasBeyondMinimums: a quota lowered below what
// a team runs stops replicas beyond their minimum (a woken min_replicas 0
// endpoint's), never a minimum's, and says so on the endpoint.
func TestLoweredQuotaStopsReplicasBeyondMinimums(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.heartbeat(t, "node-a", gpus(0, 4, "A100-80GB", nil))
	f.endpoint(t, "fraud-ep", "fraud", "v1", "gpu-a100-80gb", "standard", 1)
	f.endpoint(t, "nightly", "fraud", "v2", "gpu-a100-80gb", "batch", 0)
	f.wake(t, "nightly")
	f.reconcile(t)
	if f.replicasOf(t, "nightly") != 1 {
		t.Fatalf("woken nightly has %d replicas, want 1", f.replicasOf(t, "nightly"))
	}
	f.setQuota(t, "A100-80GB", 1) // fraud-ep's minimum holds exactly 1
	if p := f.reconcile(t); p.Removed != 1 {
		t.Errorf("pass removed %d replicas, want nightly's 1", p.Removed)
	}
	if f.replicasOf(t, "nightly") != 0 || f.replicasOf(t, "fraud-ep") != 1 {
		t.Errorf("nightly %d, fraud-ep %d; want 0, 1", f.replicasOf(t, "nightly"), f.replicasOf(t, "fraud-ep"))
	}
	if e := f.get(t, "nightly"); !strings.Contains(e.PlacementError, "quota: team risk holds 1 of 1 A100-80GB GPUs") {
		t.Errorf("nightly placement_error = %q, want the quota named", e.PlacementError)
	}
}

// TestTeamWithoutQuotaIsCappedByTheDefault (issue 25 point 9): a team with
// no quota row was unlimited; with an operator default of 1 A100 it gets
// one of the 3 whole-GPU replicas its endpoint wants, the endpoint says
// the quota holds the rest back, and a quota of the team's own overrides
// the default.
func TestTeamWithoutQuotaIsCappedByTheDefault(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.fleet = fleet.New(f.pool, fleet.Options{Clock: f.clock, DefaultQuota: map[string]float64{"A100-80GB": 1}})
	f.heartbeat(t, "node-a", gpus(0, 4, "A100-80GB", nil))
	f.endpoint(t, "fraud-ep", "fraud", "v1", "gpu-a100-80gb", "standard", 3)
	f.reconcile(t)
	if got := f.replicasOf(t, "fraud-ep"); got != 1 {
		t.Fatalf("replicas under a default quota of 1 A100 = %d, want 1", got)
	}
	if want := "quota: team risk holds 1 of 1 A100-80GB GPUs"; !strings.Contains(f.get(t, "fraud-ep").PlacementError, want) {
		t.Errorf("placement_error = %q, want it to contain %q", f.get(t, "fraud-ep").PlacementError, want)
	}
	f.setQuota(t, "A100-80GB", 3)
	f.reconcile(t)
	if got := f.replicasOf(t, "fraud-ep"); got != 3 {
		t.Errorf("replicas with the team's own quota of 3 = %d, want 3", got)
	}
}

// grantCritical grants team risk the critical tier, as a platform admin
// (newFixture does, as an operator of a team with critical endpoints
// would).
func (f *fixture) grantCritical(t *testing.T) {
	t.Helper()
	if err := f.quotas.GrantTier(t.Context(), f.root, "risk", quota.TierCritical); err != nil {
		t.Fatal(err)
	}
}

// TestCriticalTierNeedsAPlatformGrant (issue 25 point 9): any engineer
// could mark an endpoint critical and preempt other workloads. Without the
// team's grant a critical endpoint is placed as standard: it takes no GPU
// from a standard replica beyond its minimum, and says why; a team admin
// cannot grant it; once a platform admin does, the same endpoint preempts.
func TestCriticalTierNeedsAPlatformGrant(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	if err := f.quotas.RevokeTier(t.Context(), f.root, "risk", quota.TierCritical); err != nil {
		t.Fatal(err)
	}
	f.heartbeat(t, "node-a", gpus(0, 1, "A100-80GB", nil))
	f.endpoint(t, "nightly", "fraud", "v2", "gpu-a100-80gb", "standard", 0)
	f.wake(t, "nightly")
	f.reconcile(t)
	f.endpoint(t, "grab", "fraud", "v1", "gpu-a100-80gb", "critical", 1)
	if p := f.reconcile(t); p.Preempted != 0 || f.replicasOf(t, "nightly") != 1 {
		t.Fatalf("an ungranted critical endpoint preempted %d replicas (nightly has %d)", p.Preempted, f.replicasOf(t, "nightly"))
	}
	if e := f.get(t, "grab"); !strings.Contains(e.PlacementError, "tier critical is not granted") {
		t.Errorf("grab placement_error = %q, want it to say the tier is not granted", e.PlacementError)
	}
	if err := f.quotas.GrantTier(t.Context(), f.eng, "risk", quota.TierCritical); err == nil {
		t.Fatal("a team admin granted their own team the critical tier")
	}
	f.grantCritical(t)
	if p := f.reconcile(t); p.Preempted != 1 || f.replicasOf(t, "grab") != 1 {
		t.Fatalf("granted: pass preempted %d, grab has %d replicas; want 1, 1", p.Preempted, f.replicasOf(t, "grab"))
	}
}

// TestMemoryIsAQuotaResource (issue 25 point 9): memory was no quota
// resource, so a team under a core quota could still take a node's memory.
// A memory quota of 4096 MiB gives a team two of the five 2048 MiB CPU
// replicas it wants, however many cores it may use, and names the quota.
func TestMemoryIsAQuotaResource(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.cpuVersion(t)
	f.cpuHeartbeat(t, "cpu-a", 64, 65536)
	f.setQuota(t, quota.MemoryResource, 4096)
	if _, err := f.eps.Create(t.Context(), f.eng, endpoint.Spec{Name: "xgb-ep", Model: "xgb", Version: "x1",
		Settings: endpoint.Settings{InstanceProfile: endpoint.ProfileCPU, MinReplicas: 5, MaxReplicas: 5, Tier: "standard", RetentionDays: 30}}); err != nil {
		t.Fatal(err)
	}
	f.reconcile(t)
	if got := f.replicasOf(t, "xgb-ep"); got != 2 {
		t.Fatalf("replicas under a 4096 MiB memory quota = %d, want 2", got)
	}
	if want := "quota: team risk holds 4096 of 4096 MiB of memory"; !strings.Contains(f.get(t, "xgb-ep").PlacementError, want) {
		t.Errorf("placement_error = %q, want it to contain %q", f.get(t, "xgb-ep").PlacementError, want)
	}
	if _, err := f.quotas.Set(t.Context(), f.root, "risk", quota.MemoryResource, 1000.5); err == nil {
		t.Error("a fractional MiB quota was accepted")
	}
}
