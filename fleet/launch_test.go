package fleet_test

import (
	"reflect"
	"strings"
	"testing"

	"modelplane/busapi"
)

// A replica's launch, as its heartbeat reports it, is stored on the
// replica and listed with the endpoint's replicas: replaced when the
// runtime restarts with another one, kept by a heartbeat without one,
// cut to its bounds whatever the agent sends, and never a change that
// wakes the reconciler.
func TestHeartbeatLaunchIsStoredOnTheReplica(t *testing.T) {
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
	r := rs[0]
	observe := func(r busapi.ReplicaStatus) bool {
		t.Helper()
		changed, err := f.fleet.Observe(t.Context(), busapi.NodeStatus{Node: "node-a", BootID: "b1", LeaseSeconds: 15, GPUs: inv,
			Replicas: []busapi.ReplicaStatus{r}})
		if err != nil {
			t.Fatal(err)
		}
		return changed
	}
	launch := func() *busapi.Launch {
		t.Helper()
		reps, err := f.eps.Replicas(t.Context(), f.eng, "fraud-ep")
		if err != nil {
			t.Fatal(err)
		}
		if len(reps) != 1 {
			t.Fatalf("replicas = %+v, want one", reps)
		}
		return reps[0].Launch
	}
	observe(r)
	if l := launch(); l != nil {
		t.Errorf("launch before the node reported one = %+v, want none", l)
	}

	first := &busapi.Launch{Argv: []string{"tritonserver", "--model-repository=/var/lib/mp/r.d/repository", "--http-port=9001"},
		Env: []string{"CUDA_VISIBLE_DEVICES=MIG-1", "MP_REPLICA_TOKEN=" + busapi.LaunchSecret}, Dir: "/var/lib/mp/r.d/repository",
		Files: []busapi.LaunchFile{{Path: "fraud/1", Link: "/cache/fraud/v1"}, {Path: "fraud/config.pbtxt", Content: "name: \"fraud\"\nmax_batch_size: 8\n"}}}
	r.Launch = first
	if observe(r) {
		t.Error("a launch reported a change to the reconciler")
	}
	if l := launch(); !reflect.DeepEqual(l, first) {
		t.Errorf("stored launch = %+v, want %+v", l, first)
	}
	if e := f.get(t, "fraud-ep"); e.Replicas[0].Launch != nil {
		t.Errorf("endpoint get carries the launch %+v; only the replicas list does", e.Replicas[0].Launch)
	}

	// A heartbeat without a launch (the driver has not started the
	// runtime again yet) keeps the stored one; a restart on another port
	// replaces it.
	r.Launch = nil
	observe(r)
	if l := launch(); !reflect.DeepEqual(l, first) {
		t.Errorf("launch after a heartbeat without one = %+v, want the stored %+v", l, first)
	}
	second := *first
	second.Argv = []string{"tritonserver", "--model-repository=/var/lib/mp/r.d/repository", "--http-port=9002"}
	r.Launch = &second
	observe(r)
	if l := launch(); !reflect.DeepEqual(l, &second) {
		t.Errorf("launch after a restart = %+v, want %+v", l, second)
	}

	// An agent sending more than the bounds gets them imposed.
	huge := busapi.Launch{Argv: []string{"x"}, Files: []busapi.LaunchFile{{Path: "big", Content: strings.Repeat("a", 1<<20)}}}
	r.Launch = &huge
	observe(r)
	l := launch()
	if l == nil || !l.Truncated || len(l.Files) != 1 || len(l.Files[0].Content) != busapi.LaunchMaxFileBytes || !l.Files[0].Truncated {
		t.Errorf("stored launch of an oversized report = %+v, want its file cut to %d bytes and marked", l, busapi.LaunchMaxFileBytes)
	}
}
