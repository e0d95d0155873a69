package fleet_test

import (
	"testing"

	"modelplane/busapi"
)

// TestRouteCarriesTheReplicasServerName: the server name a node reports
// for a replica (a Kubernetes pool's pods serve its pool's certificate)
// reaches the replica's route entry, a change of the name alone writes
// the entry again, and a report whose name no certificate could name is
// dropped: the replica is not routed on it.
func TestRouteCarriesTheReplicasServerName(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	inv := gpus(0, 1, "A100-80GB", seven1g())
	f.heartbeat(t, "node-a", inv)
	f.endpoint(t, "fraud-ep", "fraud", "v1", "mig-1g.10gb", "critical", 1)
	f.reconcile(t)
	rs := ready(f.desired(t, "node-a"))
	if len(rs) != 1 {
		t.Fatalf("desired = %+v, want one replica", rs)
	}
	routed := func() []busapi.RouteReplica {
		t.Helper()
		rt, ok := f.route(t, "fraud-ep")
		if !ok || len(rt.Versions) != 1 {
			t.Fatalf("route = %+v, want v1", rt)
		}
		return rt.Versions[0].Replicas
	}
	for _, step := range []struct {
		name, serverName string
		// changed is whether the heartbeat wakes the reconciler.
		changed bool
		want    string
	}{
		{"named", "pool-a.replicas.modelplane.internal", true, "pool-a.replicas.modelplane.internal"},
		{"the same name again", "pool-a.replicas.modelplane.internal", false, "pool-a.replicas.modelplane.internal"},
		{"renamed", "pool-b.replicas.modelplane.internal", true, "pool-b.replicas.modelplane.internal"},
		{"unnamed", "", true, ""},
	} {
		r := rs[0]
		r.ServerName = step.serverName
		if got := f.heartbeat(t, "node-a", inv, r); got != step.changed {
			t.Errorf("%s: heartbeat changed = %v, want %v", step.name, got, step.changed)
		}
		f.reconcile(t)
		reps := routed()
		if len(reps) != 1 || reps[0].ID != r.ID || reps[0].Addr != r.Addr || reps[0].ServerName != step.want {
			t.Errorf("%s: routed %+v, want %s at %s named %q", step.name, reps, r.ID, r.Addr, step.want)
		}
	}

	// A name with a port is no name: the report is dropped, and the
	// replica, never reported ready on it, is not routed.
	f.endpoint(t, "other-ep", "fraud", "v2", "mig-1g.10gb", "critical", 1)
	f.reconcile(t)
	var other busapi.ReplicaStatus
	for _, r := range ready(f.desired(t, "node-a")) {
		if r.ID != rs[0].ID {
			other = r
		}
	}
	other.ServerName = "pool-a.replicas.modelplane.internal:443"
	f.heartbeat(t, "node-a", inv, rs[0], other)
	f.reconcile(t)
	if rt, _ := f.route(t, "other-ep"); len(rt.Versions) != 1 || len(rt.Versions[0].Replicas) != 0 {
		t.Errorf("other-ep's route = %+v, want v2 with no replica routed", rt)
	}
	for _, r := range f.get(t, "other-ep").Replicas {
		if r.State == busapi.StateReady {
			t.Errorf("replica %+v is ready on a report with a bad server name", r)
		}
	}
}
