package fleet_test

import (
	"encoding/json"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"modelplane/bus"
	"modelplane/busapi"
	"modelplane/db"
	"modelplane/fleet"
	"modelplane/internal/natstest"
	"modelplane/internal/wait"
	"modelplane/trust"
)

// counter reads one series of the fleet's counters.
func counter(t *testing.T, reg *prometheus.Registry, name, reason string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) == 0 || m.GetLabel()[0].GetValue() == reason {
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no series %s{reason=%q}", name, reason)
	return 0
}

// TestReplicaOffItsNodeIsNotRecorded: a replica reported at another host,
// or at a port outside its node's range, is not recorded (never routed)
// and is counted; one on the node's address is.
func TestReplicaOffItsNodeIsNotRecorded(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	reg := prometheus.NewRegistry()
	if err := f.fleet.Register(reg); err != nil {
		t.Fatal(err)
	}
	inv := gpus(0, 2, "A100-80GB", seven1g())
	f.heartbeat(t, "node-a", inv)
	if err := trust.SetAddress(t.Context(), db.New(f.pool), "node-a", trust.Address{Host: "127.0.0.1", PortFirst: 31000, PortLast: 31099}); err != nil {
		t.Fatal(err)
	}
	f.endpoint(t, "fraud-ep", "fraud", "v1", "mig-1g.10gb", "critical", 3)
	f.reconcile(t)
	d := f.desired(t, "node-a")
	if len(d.Replicas) != 3 {
		t.Fatalf("desired = %+v, want 3 replicas", d)
	}
	addrs := []string{"127.0.0.1:31005", "10.1.2.3:31006", "127.0.0.1:32000"}
	var reps []busapi.ReplicaStatus
	for i, r := range d.Replicas {
		reps = append(reps, busapi.ReplicaStatus{ID: r.ID, State: busapi.StateReady, Addr: addrs[i]})
	}
	f.heartbeat(t, "node-a", inv, reps...)
	f.reconcile(t)
	rt, _ := f.route(t, "fraud-ep")
	if len(rt.Versions) != 1 || len(rt.Versions[0].Replicas) != 1 || rt.Versions[0].Replicas[0].Addr != "127.0.0.1:31005" {
		t.Fatalf("route = %+v, want only the replica on the node's address", rt)
	}
	if got := counter(t, reg, "modelplane_fleet_replica_reports_off_node_total", ""); got != 2 {
		t.Errorf("off-node reports counted %v, want 2", got)
	}
}

// TestSetAddressRefusesNonsense: the registered address is checked.
func TestSetAddressRefusesNonsense(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	for _, tc := range []struct {
		node string
		a    trust.Address
	}{
		{"node.a", trust.Address{Host: "127.0.0.1"}},
		{"node-a", trust.Address{Host: ""}},
		{"node-a", trust.Address{Host: "127.0.0.1", PortFirst: 10, PortLast: 5}},
		{"node-a", trust.Address{Host: "127.0.0.1", PortFirst: 1, PortLast: 70000}},
		{"node-a", trust.Address{Host: "http://x"}},
	} {
		if err := trust.SetAddress(t.Context(), db.New(f.pool), tc.node, tc.a); err == nil {
			t.Errorf("SetAddress(%q, %+v) = nil, want an error", tc.node, tc.a)
		}
	}
	if _, err := db.New(f.pool).NodeAddressGet(t.Context(), "node-a"); !errors.Is(err, db.ErrNotFound) {
		t.Errorf("a refused address was stored (err %v)", err)
	}
}

// TestHeartbeatSpeaksOnlyForItsSubject: the intake takes the node from the
// subject: a payload naming another node is dropped and counted; the
// node's own heartbeat is recorded.
func TestHeartbeatSpeaksOnlyForItsSubject(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	reg := prometheus.NewRegistry()
	if err := f.fleet.Register(reg); err != nil {
		t.Fatal(err)
	}
	srv, cp := natstest.Connect(t)
	js, err := jetstream.New(cp)
	if err != nil {
		t.Fatal(err)
	}
	if err := bus.Ensure(t.Context(), js); err != nil {
		t.Fatal(err)
	}
	in := fleet.NewIntake(f.fleet, cp, slog.New(slog.DiscardHandler), nil)
	if err := in.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(in.Stop)
	a, err := nats.Connect(srv.ClientURL(), natstest.Agent(t, "node-a")...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)

	beat := func(node string) []byte {
		b, _ := json.Marshal(busapi.NodeStatus{Node: node, BootID: "b1", LeaseSeconds: 15, GPUs: gpus(0, 1, "A100-80GB", nil)})
		return b
	}
	// Node a's credential may publish only on its own subject: a payload
	// claiming node b there is dropped.
	if err := a.Publish(busapi.NodeStatusSubject("node-a"), beat("node-b")); err != nil {
		t.Fatal(err)
	}
	if err := a.Publish(busapi.NodeStatusSubject("node-a"), beat("node-a")); err != nil {
		t.Fatal(err)
	}
	q := db.New(f.pool)
	wait.Eventually(t, 10*time.Second, func() bool {
		_, err := q.NodeGet(t.Context(), "node-a")
		return err == nil
	}, "node a's own heartbeat was never recorded")
	if _, err := q.NodeGet(t.Context(), "node-b"); !errors.Is(err, db.ErrNotFound) {
		t.Errorf("node b was registered from node a's word (err %v)", err)
	}
	for reason, want := range map[string]float64{"node_mismatch": 1, "bad_subject": 0} {
		if got := counter(t, reg, "modelplane_fleet_heartbeats_dropped_total", reason); got != want {
			t.Errorf("dropped %s = %v, want %v", reason, got, want)
		}
	}
}
