package fleet_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"modelplane/busapi"
	"modelplane/endpoint"
	"modelplane/fleet"
)

func TestPlacesReplicasWritesDesiredAndRoutes(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	migNode := gpus(0, 2, "A100-80GB", seven1g())
	fullNode := gpus(0, 4, "H100-80GB", nil)
	if !f.heartbeat(t, "node-a", migNode) || !f.heartbeat(t, "node-b", fullNode) {
		t.Fatal("first heartbeat of a node must report a change")
	}
	f.endpoint(t, "fraud-ep", "fraud", "v1", "mig-1g.10gb", "critical", 3)
	f.endpoint(t, "chat-ep", "chat", "c1", "mig-3g.40gb", "standard", 1)

	p := f.reconcile(t)
	if p.Placed != 4 || p.Unplaced != 0 {
		t.Fatalf("pass = %+v, want 4 placed", p)
	}
	da, db_ := f.desired(t, "node-a"), f.desired(t, "node-b")
	if len(da.Replicas) != 3 || da.Generation != 1 {
		t.Fatalf("node-a desired = %+v, want the 3 fraud replicas at generation 1", da)
	}
	for _, r := range da.Replicas {
		if r.Profile != "mig-1g.10gb" || r.Endpoint != "fraud-ep" || r.Version != "v1" || r.Team != "risk" || len(r.Slots) != 1 {
			t.Errorf("fraud replica = %+v", r)
		}
	}
	// No H100 in MIG mode: chat (40 GB, H100) falls back to a whole H100.
	if len(db_.Replicas) != 1 || db_.Replicas[0].Profile != busapi.ProfileFull || db_.Replicas[0].GPUType != "H100-80GB" {
		t.Fatalf("node-b desired = %+v, want chat on a whole H100", db_)
	}
	if e := f.get(t, "fraud-ep"); e.Status != fleet.StatusStarting || len(e.Replicas) != 3 {
		t.Fatalf("fraud-ep = %s with %d replicas, want starting with 3", e.Status, len(e.Replicas))
	}
	rt, ok := f.route(t, "fraud-ep")
	if !ok || len(rt.Versions) != 1 || rt.Versions[0].Weight != 100 || len(rt.Versions[0].Replicas) != 0 {
		t.Fatalf("route before ready = %+v", rt)
	}

	// Level-triggered: a second pass with nothing new writes nothing.
	if p := f.reconcile(t); p.Wrote() || p.Placed != 0 || p.Removed != 0 {
		t.Fatalf("idle pass = %+v, want nothing", p)
	}

	// The agent reports ready: the route gets the addresses, the endpoint is ready.
	if !f.heartbeat(t, "node-a", migNode, ready(da)...) {
		t.Fatal("replica states changed but Observe reported no change")
	}
	if f.heartbeat(t, "node-a", migNode, ready(da)...) {
		t.Fatal("the same heartbeat twice must report no change")
	}
	if p := f.reconcile(t); p.RoutesWritten != 1 || p.DesiredWritten != 0 {
		t.Fatalf("pass after ready = %+v, want one route", p)
	}
	rt, _ = f.route(t, "fraud-ep")
	if len(rt.Versions[0].Replicas) != 3 || rt.Generation != 2 {
		t.Fatalf("route after ready = %+v, want 3 replicas at generation 2", rt)
	}
	if e := f.get(t, "fraud-ep"); e.Status != fleet.StatusReady {
		t.Fatalf("fraud-ep status = %s, want ready", e.Status)
	}
}

func TestScaleDownAndTrafficMoveReplaceReplicas(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.heartbeat(t, "node-a", gpus(0, 2, "A100-80GB", seven1g()))
	f.endpoint(t, "fraud-ep", "fraud", "v1", "mig-1g.10gb", "critical", 3)
	f.reconcile(t)
	if _, err := f.eps.Update(t.Context(), f.eng, "fraud-ep", endpoint.Settings{InstanceProfile: "mig-1g.10gb", MinReplicas: 1, MaxReplicas: 3,
		Tier: "critical", RetentionDays: 30}); err != nil {
		t.Fatal(err)
	}
	if p := f.reconcile(t); p.Removed != 2 {
		t.Fatalf("scale 3→1 removed %d, want 2", p.Removed)
	}
	if _, err := f.eps.SetTraffic(t.Context(), f.eng, "fraud-ep", []endpoint.Weight{{Version: "v1", Weight: 90}, {Version: "v2", Weight: 10}}); err != nil {
		t.Fatal(err)
	}
	if p := f.reconcile(t); p.Placed != 1 || p.Removed != 0 {
		t.Fatalf("adding v2 = %+v, want one placed", p)
	}
	if _, err := f.eps.SetTraffic(t.Context(), f.eng, "fraud-ep", []endpoint.Weight{{Version: "v2", Weight: 100}}); err != nil {
		t.Fatal(err)
	}
	if p := f.reconcile(t); p.Removed != 1 || p.Placed != 0 {
		t.Fatalf("dropping v1 = %+v, want its replica removed", p)
	}
	d := f.desired(t, "node-a")
	if len(d.Replicas) != 1 || d.Replicas[0].Version != "v2" {
		t.Fatalf("desired = %+v, want one v2 replica", d)
	}
}

func TestUnplaceableIsShownOnTheEndpoint(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.heartbeat(t, "node-a", gpus(0, 8, "A100-80GB", nil))
	f.endpoint(t, "chat-ep", "chat", "c1", "mig-3g.40gb", "standard", 1)
	f.endpoint(t, "big-ep", "big", "b1", "gpu-a100-80gb", "standard", 3)
	p := f.reconcile(t)
	if p.Placed != 2 || p.Unplaced != 2 {
		t.Fatalf("pass = %+v, want 2 big replicas placed (8 GPUs / 4) and chat plus one big unplaced", p)
	}
	e := f.get(t, "chat-ep")
	if e.Status != fleet.StatusUnplaced || !strings.Contains(e.PlacementError, "H100-80GB") || !strings.Contains(e.PlacementError, "3g.40gb") {
		t.Fatalf("chat-ep = %s %q, want unplaced naming the slice and H100", e.Status, e.PlacementError)
	}
	e = f.get(t, "big-ep")
	if e.PlacementError == "" || len(e.Replicas) != 2 {
		t.Fatalf("big-ep = %q with %d replicas, want an error and 2 replicas", e.PlacementError, len(e.Replicas))
	}
	for _, r := range e.Replicas {
		if len(r.Slots) != 4 {
			t.Errorf("tensor-parallel replica %s holds %v, want 4 GPUs", r.Name, r.Slots)
		}
	}
	// Capacity arrives: the next pass places what was missing and clears the error.
	f.heartbeat(t, "node-h", gpus(0, 1, "H100-80GB", []string{"mig-3g.40gb", "mig-4g.40gb"}))
	f.heartbeat(t, "node-b", gpus(0, 4, "A100-80GB", nil))
	if p := f.reconcile(t); p.Placed != 2 {
		t.Fatalf("pass with capacity = %+v, want 2 placed", p)
	}
	if e := f.get(t, "chat-ep"); e.PlacementError != "" || e.Replicas[0].Profile != "mig-3g.40gb" {
		t.Fatalf("chat-ep = %q on %+v", e.PlacementError, e.Replicas)
	}
}

func TestLostNodeReplicasMoveAndReturningNodeIsEmptied(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	inv := gpus(0, 1, "A100-80GB", seven1g())
	f.heartbeat(t, "node-a", inv)
	f.heartbeat(t, "node-b", inv)
	f.endpoint(t, "fraud-ep", "fraud", "v1", "mig-1g.10gb", "critical", 2)
	f.reconcile(t)
	if a, b := f.desired(t, "node-a"), f.desired(t, "node-b"); len(a.Replicas) != 1 || len(b.Replicas) != 1 {
		t.Fatalf("replicas not spread over nodes: a=%d b=%d", len(a.Replicas), len(b.Replicas))
	}
	// node-a goes silent for longer than its 15 s lease; node-b keeps beating.
	f.clock.Advance(10 * time.Second)
	f.heartbeat(t, "node-b", inv)
	f.clock.Advance(10 * time.Second)
	f.heartbeat(t, "node-b", inv)
	p := f.reconcile(t)
	if len(p.LostNodes) != 1 || p.LostNodes[0] != "node-a" || p.Placed != 1 {
		t.Fatalf("pass = %+v, want node-a lost and its replica placed again", p)
	}
	if a := f.desired(t, "node-a"); len(a.Replicas) != 0 || a.Generation != 2 {
		t.Fatalf("lost node desired = %+v, want empty at generation 2", a)
	}
	if b := f.desired(t, "node-b"); len(b.Replicas) != 2 {
		t.Fatalf("node-b desired has %d replicas, want 2", len(b.Replicas))
	}
	// node-a comes back: it is ready again, keeps its empty desired state, and
	// can take new replicas.
	if !f.heartbeat(t, "node-a", inv) {
		t.Fatal("a lost node coming back must report a change")
	}
	nodes, err := f.fleet.Nodes(t.Context(), f.root)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		if n.State != "ready" {
			t.Errorf("node %s is %s, want ready", n.Name, n.State)
		}
	}
	if p := f.reconcile(t); p.DesiredWritten != 0 {
		t.Fatalf("pass after return = %+v, want no new desired state", p)
	}
}

func TestJustStartedControlPlaneDoesNotDeclareNodesLost(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.heartbeat(t, "node-a", gpus(0, 1, "A100-80GB", nil))
	f.clock.Advance(time.Hour)
	// A control plane that started watching heartbeats a second ago has not
	// yet had the chance to hear node-a.
	p, err := f.fleet.Reconcile(t.Context(), f.clock.Now().Add(-time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if len(p.LostNodes) != 0 {
		t.Fatalf("lost %v right after start", p.LostNodes)
	}
	if p := f.reconcile(t); len(p.LostNodes) != 1 {
		t.Fatalf("after watching for an hour, lost = %v, want node-a", p.LostNodes)
	}
}

func TestNewGPULayoutReplacesAllocations(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.heartbeat(t, "node-a", gpus(0, 1, "A100-80GB", seven1g()))
	f.endpoint(t, "fraud-ep", "fraud", "v1", "mig-1g.10gb", "critical", 2)
	f.reconcile(t)
	// MIG reconfigured to 3g+4g: the 1g allocations are gone; the replicas
	// are placed on the new layout (the smallest slice that fits: 3g.40gb).
	if !f.heartbeat(t, "node-a", gpus(0, 1, "A100-80GB", []string{"mig-3g.40gb", "mig-4g.40gb"})) {
		t.Fatal("a new layout must report a change")
	}
	f.reconcile(t)
	d := f.desired(t, "node-a")
	if len(d.Replicas) != 2 || d.Replicas[0].Profile == "mig-1g.10gb" {
		t.Fatalf("desired after relayout = %+v", d)
	}
}

// TestGrownInventoryKeepsItsReplicas: a node (or a cluster pool) whose
// inventory grows keeps the replicas on the slices it still has alike,
// and only the new capacity is placed; a relayout replaces only the
// replicas of the slices that changed.
func TestGrownInventoryKeepsItsReplicas(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.heartbeat(t, "node-a", gpus(0, 1, "A100-80GB", seven1g()))
	f.endpoint(t, "fraud-ep", "fraud", "v1", "mig-1g.10gb", "critical", 9)
	f.reconcile(t)
	ids := func() []string {
		var out []string
		for _, r := range f.desired(t, "node-a").Replicas {
			out = append(out, r.ID)
		}
		slices.Sort(out)
		return out
	}
	before := ids()
	if len(before) != 7 {
		t.Fatalf("desired = %v, want the seven replicas that fit", before)
	}
	if !f.heartbeat(t, "node-a", gpus(0, 2, "A100-80GB", seven1g())) {
		t.Fatal("a grown inventory must report a change")
	}
	f.reconcile(t)
	after := ids()
	if len(after) != 9 || len(slices.DeleteFunc(slices.Clone(after), func(id string) bool { return !slices.Contains(before, id) })) != 7 {
		t.Fatalf("desired after growth = %v, want the seven of before %v and two more", after, before)
	}
	// GPU 1 relaid out: its two replicas are placed again, GPU 0's seven stay.
	f.heartbeat(t, "node-a", append(gpus(0, 1, "A100-80GB", seven1g()), gpus(1, 1, "A100-80GB", []string{"mig-3g.40gb", "mig-4g.40gb"})...))
	f.reconcile(t)
	kept := 0
	for _, id := range ids() {
		if slices.Contains(before, id) {
			kept++
		}
	}
	if kept != 7 {
		t.Fatalf("desired after GPU 1's relayout = %v, want GPU 0's seven replicas %v kept", ids(), before)
	}
}

func TestConcurrentPassesNeverDoubleAllocate(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	for i := range 4 {
		f.heartbeat(t, fmt.Sprintf("node-%d", i), gpus(0, 2, "A100-80GB", seven1g()))
	}
	for i := range 6 {
		f.endpoint(t, fmt.Sprintf("fraud-%d", i), "fraud", "v1", "mig-1g.10gb", "critical", 9)
	}
	// 54 replicas wanted, 56 slices: eight passes race for them.
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			if _, err := f.fleet.Reconcile(t.Context(), f.start); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	var replicas, allocs, distinct int
	if err := f.pool.QueryRow(t.Context(), `SELECT (SELECT count(*) FROM replicas), (SELECT count(*) FROM allocations),
		(SELECT count(DISTINCT (node_id, gpu, slice)) FROM allocations)`).Scan(&replicas, &allocs, &distinct); err != nil {
		t.Fatal(err)
	}
	if replicas != 54 || allocs != 54 || distinct != 54 {
		t.Fatalf("replicas=%d allocations=%d distinct slices=%d, want 54 each", replicas, allocs, distinct)
	}
	// The primary key refuses a second holder whatever the placer does.
	_, err := f.pool.Exec(t.Context(), `INSERT INTO allocations (node_id, gpu, slice, replica_id)
		SELECT node_id, gpu, slice, (SELECT max(id) FROM replicas) FROM allocations LIMIT 1`)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "23505" || pgErr.ConstraintName != "allocations_pkey" {
		t.Fatalf("double allocation error = %v, want a unique violation of allocations_pkey", err)
	}
}

func TestDeletedEndpointLeavesTheFleetAndTheRoutingTable(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.heartbeat(t, "node-a", gpus(0, 1, "A100-80GB", seven1g()))
	f.endpoint(t, "fraud-ep", "fraud", "v1", "mig-1g.10gb", "critical", 2)
	f.reconcile(t)
	if err := f.eps.Delete(t.Context(), f.eng, "fraud-ep"); err != nil {
		t.Fatal(err)
	}
	p := f.reconcile(t)
	if p.DesiredWritten != 1 || p.RoutesWritten != 1 {
		t.Fatalf("pass after delete = %+v", p)
	}
	if d := f.desired(t, "node-a"); len(d.Replicas) != 0 {
		t.Fatalf("desired after delete = %+v", d)
	}
	if _, ok := f.route(t, "fraud-ep"); ok {
		t.Fatal("route of a deleted endpoint still published")
	}
}

func TestBadHeartbeatsAreRefused(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	for name, st := range map[string]busapi.NodeStatus{
		"bad name":     {Node: "Node.A", LeaseSeconds: 15},
		"no lease":     {Node: "node-a"},
		"unknown gpu":  {Node: "node-a", LeaseSeconds: 15, GPUs: gpus(0, 1, "T4", nil)},
		"mig mismatch": {Node: "node-a", LeaseSeconds: 15, GPUs: []busapi.GPU{{Index: 0, Type: "A100-80GB", MIG: true, Slices: []busapi.Slice{{Profile: "full"}}}}},
		"bad state":    {Node: "node-a", LeaseSeconds: 15, Replicas: []busapi.ReplicaStatus{{ID: "x", State: "exploded"}}},
	} {
		if _, err := f.fleet.Observe(t.Context(), st); !errors.Is(err, fleet.ErrBadStatus) {
			t.Errorf("%s: err = %v, want ErrBadStatus", name, err)
		}
	}
}

// A version routed at weight 0 (a rollout's candidate before its first
// step, or after a rollback, kept for inspection) gets its replicas placed
// like any other, and its routing entry lists it at weight 0 with them.
// Writing one endpoint's entry from a rollout is tested in package route.
func TestWeightZeroVersionGetsReplicas(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	inv := gpus(0, 2, "A100-80GB", seven1g())
	f.heartbeat(t, "node-a", inv)
	f.endpoint(t, "fraud-ep", "fraud", "v1", "mig-1g.10gb", "critical", 1)
	if _, err := f.eps.SetTraffic(t.Context(), f.eng, "fraud-ep", []endpoint.Weight{{Version: "v1", Weight: 100}, {Version: "v2", Weight: 0}}); err != nil {
		t.Fatal(err)
	}
	if p := f.reconcile(t); p.Placed != 2 {
		t.Fatalf("pass = %+v, want a replica of v1 and one of v2 (weight 0)", p)
	}
	f.heartbeat(t, "node-a", inv, ready(f.desired(t, "node-a"))...)
	f.reconcile(t)
	rt, _ := f.route(t, "fraud-ep")
	if len(rt.Versions) != 2 || rt.Versions[1].Name != "v2" || rt.Versions[1].Weight != 0 || len(rt.Versions[1].Replicas) != 1 {
		t.Errorf("route = %+v, want v2 at weight 0 with its ready replica", rt.Versions)
	}
}
