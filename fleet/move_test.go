package fleet_test

import (
	"strings"
	"testing"

	"modelplane/busapi"
	"modelplane/fleet"
)

func failed(id string, failures int) busapi.ReplicaStatus {
	return busapi.ReplicaStatus{ID: id, State: busapi.StateFailed, Reason: "runtime exited before it was ready: exit status 3", Failures: failures}
}

func TestReplicaFailingOnItsNodeIsPlacedOnAnother(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	inv := gpus(0, 1, "A100-80GB", seven1g())
	f.heartbeat(t, "node-a", inv)
	f.heartbeat(t, "node-b", inv)
	f.endpoint(t, "fraud-ep", "fraud", "v1", "mig-1g.10gb", "critical", 1)
	f.reconcile(t)
	first := f.get(t, "fraud-ep").Replicas[0]
	bad := first.Node
	good := map[string]string{"node-a": "node-b", "node-b": "node-a"}[bad]

	// Failing, but not yet often enough in a row: the agent retries there.
	f.heartbeat(t, bad, inv, failed(first.Name, fleet.MoveAfterFailures-1))
	if p := f.reconcile(t); len(p.Moved) != 0 {
		t.Fatalf("moved after %d failures: %+v", fleet.MoveAfterFailures-1, p)
	}
	if got := f.get(t, "fraud-ep").Replicas; len(got) != 1 || got[0].Failures != fleet.MoveAfterFailures-1 || got[0].State != busapi.StateFailed {
		t.Fatalf("replica = %+v, want failed with its failures shown", got)
	}

	f.heartbeat(t, bad, inv, failed(first.Name, fleet.MoveAfterFailures))
	p := f.reconcile(t)
	if len(p.Moved) != 1 || p.Moved[0] != first.Name || p.Placed != 1 {
		t.Fatalf("pass = %+v, want %s moved and a replica placed", p, first.Name)
	}
	if d := f.desired(t, bad); len(d.Replicas) != 0 {
		t.Errorf("the failing node still runs %+v", d.Replicas)
	}
	reps := f.get(t, "fraud-ep").Replicas
	if len(reps) != 1 || reps[0].Node != good || reps[0].Name == first.Name {
		t.Fatalf("replicas = %+v, want a new one on %s", reps, good)
	}
	for _, want := range []string{"not on " + bad, first.Name, "failed 3 times in a row", "exit status 3"} {
		if !strings.Contains(reps[0].PlacementNote, want) {
			t.Errorf("placement note %q lacks %q", reps[0].PlacementNote, want)
		}
	}
	if f.get(t, "fraud-ep").PlacementError != "" {
		t.Errorf("placement error = %q after a successful move", f.get(t, "fraud-ep").PlacementError)
	}

	// It fails on the other node too: nowhere is left for a while, and
	// the endpoint says why.
	second := reps[0].Name
	f.heartbeat(t, good, inv, failed(second, fleet.MoveAfterFailures))
	if p := f.reconcile(t); len(p.Moved) != 1 || p.Placed != 0 || p.Unplaced != 1 {
		t.Fatalf("pass = %+v, want the second replica moved and nothing placed", p)
	}
	e := f.get(t, "fraud-ep")
	if e.Status != fleet.StatusUnplaced || !strings.Contains(e.PlacementError, "not on node-a") || !strings.Contains(e.PlacementError, "not on node-b") {
		t.Fatalf("endpoint = %s %q, want unplaced naming both nodes", e.Status, e.PlacementError)
	}

	// The exclusion lapses: the nodes may be fixed by now.
	f.clock.Advance(fleet.ExcludeFor)
	f.heartbeat(t, "node-a", inv)
	f.heartbeat(t, "node-b", inv)
	if p := f.reconcile(t); p.Placed != 1 {
		t.Fatalf("pass after %s = %+v, want the replica placed again", fleet.ExcludeFor, p)
	}
	if reps := f.get(t, "fraud-ep").Replicas; len(reps) != 1 || reps[0].PlacementNote != "" {
		t.Errorf("replicas after the exclusion lapsed = %+v, want one with no note", reps)
	}
}

func TestMovedReplicaDoesNotDisplaceOthers(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	// Each node has a 1g and a 3g slice: two replicas of fraud-ep, one on
	// each node's 1g.
	one := func() []busapi.GPU { return gpus(0, 1, "A100-80GB", []string{"mig-1g.10gb", "mig-3g.40gb"}) }
	f.heartbeat(t, "node-a", one())
	f.heartbeat(t, "node-b", one())
	f.endpoint(t, "fraud-ep", "fraud", "v1", "mig-1g.10gb", "critical", 2)
	f.reconcile(t)
	reps := f.get(t, "fraud-ep").Replicas
	if len(reps) != 2 || reps[0].Node == reps[1].Node {
		t.Fatalf("replicas = %+v, want one per node", reps)
	}
	// One fails for good on node-a: it may not go back there, and node-b's
	// 1g slice is the other replica's, so it lands on a 3g slice of node-b
	// (the smallest left that fits) or nowhere, never on the other's slice.
	failing, other := reps[0], reps[1]
	if failing.Node != "node-a" {
		failing, other = other, failing
	}
	f.heartbeat(t, "node-a", one(), failed(failing.Name, fleet.MoveAfterFailures))
	f.heartbeat(t, "node-b", one(), busapi.ReplicaStatus{ID: other.Name, State: busapi.StateReady, Addr: "127.0.0.1:9000"})
	p := f.reconcile(t)
	if len(p.Moved) != 1 {
		t.Fatalf("pass = %+v, want one moved", p)
	}
	reps = f.get(t, "fraud-ep").Replicas
	if len(reps) != 2 {
		t.Fatalf("replicas = %+v, want 2", reps)
	}
	for _, r := range reps {
		if r.Node != "node-b" {
			t.Errorf("replica %s on %s, want node-b", r.Name, r.Node)
		}
		if r.Name == other.Name && (r.State != busapi.StateReady || strings.Join(r.Slots, ",") != strings.Join(other.Slots, ",")) {
			t.Errorf("the ready replica changed: %+v, was %+v", r, other)
		}
	}
	if reps[0].Slots[0] == reps[1].Slots[0] {
		t.Errorf("two replicas share slot %s", reps[0].Slots[0])
	}
}
