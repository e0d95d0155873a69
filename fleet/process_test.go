package fleet_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/quartz"
	"github.com/nats-io/nats.go/jetstream"

	"modelplane/agent"
	"modelplane/agent/catalog"
	"modelplane/agent/process"
	"modelplane/bus"
	"modelplane/busapi"
	"modelplane/fleet"
	"modelplane/internal/natstest"
	"modelplane/internal/wait"
)

// openDir is a directory every user may enter: when the test runs as root
// the runtimes run as nobody and must reach their binary and model dir.
func openDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// nodeAgent is a node's agent with the desired-state bucket of its own
// NATS.
type nodeAgent struct {
	*agent.Agent
	node string
	kv   jetstream.KeyValue
	drv  agent.Driver
}

// processAgent is a node agent running the fake runtime of the process
// driver's tests with flags, as child processes.
func processAgent(t *testing.T, node, bin string, flags ...string) nodeAgent {
	t.Helper()
	models := openDir(t)
	mig := map[busapi.Slot]string{}
	for i := range 7 {
		mig[busapi.Slot{GPU: 0, Slice: i}] = fmt.Sprintf("MIG-%s-%d", node, i)
	}
	drv, err := process.New(process.Config{
		MIGDevices: mig,
		StateDir:   t.TempDir(),
		Catalog: map[string]catalog.Entry{"fake": {Name: "fake", Command: append([]string{bin, "-port", "{port}", "-model-dir", "{model_dir}"}, flags...),
			Devices: catalog.DevicesCUDAEnv, Health: "/v2/health/live", Ready: "/v2/health/ready", Metrics: "/metrics", Adapter: catalog.AdapterTriton}},
		Resolve: func(context.Context, busapi.ReplicaSpec, string) (process.Launch, error) {
			return process.Launch{Runtime: "fake", ModelDir: models}, nil
		},
		// The backoff is not what this test is about: keep it short on the
		// real clock, so three failures in a row come quickly.
		BackoffBase: time.Millisecond,
		BackoffMax:  time.Millisecond,
		Clock:       quartz.NewReal(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		drv.Close(ctx)
	})
	inv, err := agent.ParseInventory([]string{"1xA100-80GB"}, "0:7x1g.10gb")
	if err != nil {
		t.Fatal(err)
	}
	_, nc := natstest.Connect(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := bus.Ensure(t.Context(), js); err != nil {
		t.Fatal(err)
	}
	// The fake runtime stands in for the fixture's Triton versions under
	// a catalogue name of its own, so the node does not report its
	// runtimes (placement would find no triton on it): what these tests
	// check is how failures move replicas, not the runtime filter.
	a, err := agent.New(agent.Config{Node: node, GPUs: inv, StateDir: t.TempDir(), Lease: 15 * time.Second, Heartbeat: time.Second,
		Driver: unlisted{drv}},
		nc, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Stop)
	kv, err := js.KeyValue(t.Context(), busapi.BucketDesired)
	if err != nil {
		t.Fatal(err)
	}
	return nodeAgent{Agent: a, node: node, kv: kv, drv: drv}
}

// unlisted is a driver that does not say which runtimes its node runs.
type unlisted struct{ agent.Driver }

// deliver copies a node's latest desired state from the outbox to its
// agent's bucket, as the relay would.
func (f *fixture) deliver(t *testing.T, a nodeAgent) {
	t.Helper()
	data, err := json.Marshal(f.desired(t, a.node))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.kv.Put(t.Context(), a.node, data); err != nil {
		t.Fatal(err)
	}
}

// report records an agent's heartbeat, as the intake would.
func (f *fixture) report(t *testing.T, a nodeAgent) {
	t.Helper()
	if _, err := f.fleet.Observe(t.Context(), a.Status()); err != nil {
		t.Fatal(err)
	}
}

func TestRuntimeCrashingOnEveryStartIsMovedToAnotherNode(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(openDir(t), "fakeruntime")
	if out, err := exec.Command("go", "build", "-o", bin, "../agent/process/testdata/fakeruntime").CombinedOutput(); err != nil {
		t.Fatalf("build fake runtime: %v\n%s", err, out)
	}
	f := newFixture(t)
	broken := processAgent(t, "node-broken", bin, "-crash")
	f.report(t, broken)
	f.endpoint(t, "fraud-ep", "fraud", "v1", "mig-1g.10gb", "critical", 1)
	f.reconcile(t)
	f.deliver(t, broken)
	first := f.get(t, "fraud-ep").Replicas[0].Name

	// The runtime crashes on every start: the agent says so, with the
	// reason, and counts the failures in a row.
	var rs busapi.ReplicaStatus
	wait.Eventually(t, time.Minute, func() bool {
		for _, r := range broken.Status().Replicas {
			if r.ID == first {
				rs = r
			}
		}
		return rs.Failures >= fleet.MoveAfterFailures
	}, "failures never reached %d: %v", fleet.MoveAfterFailures, wait.Show(func() any { return rs }))
	if rs.State != busapi.StateFailed || !strings.Contains(rs.Reason, "exit status 3") {
		t.Fatalf("heartbeat = %+v, want failed with the exit status", rs)
	}

	// A healthy node joins; the next pass moves the replica there.
	healthy := processAgent(t, "node-healthy", bin)
	f.report(t, healthy)
	f.report(t, broken)
	if reps := f.get(t, "fraud-ep").Replicas; len(reps) != 1 || !strings.Contains(reps[0].Reason, "exit status 3") {
		t.Fatalf("replica before the move = %+v, want the runtime's reason shown", reps)
	}
	p := f.reconcile(t)
	if len(p.Moved) != 1 || p.Moved[0] != first || p.Placed != 1 {
		t.Fatalf("pass = %+v, want %s moved and placed again", p, first)
	}
	f.deliver(t, broken)
	f.deliver(t, healthy)
	reps := f.get(t, "fraud-ep").Replicas
	if len(reps) != 1 || reps[0].Node != "node-healthy" || !strings.Contains(reps[0].PlacementNote, "not on node-broken") {
		t.Fatalf("replicas = %+v, want one on node-healthy noting node-broken", reps)
	}
	moved := reps[0].Name
	wait.Eventually(t, time.Minute, func() bool {
		for _, r := range healthy.Status().Replicas {
			if r.ID == moved && r.State == busapi.StateReady {
				return true
			}
		}
		return false
	}, "moved replica never ready: %v", wait.Show(func() any { return healthy.Status().Replicas }))
	wait.Eventually(t, time.Minute, func() bool { return len(broken.Status().Replicas) == 0 },
		"the broken node still runs %v", wait.Show(func() any { return broken.Status().Replicas }))
	f.report(t, healthy)
	f.report(t, broken)
	f.reconcile(t)
	if e := f.get(t, "fraud-ep"); e.Status != fleet.StatusReady {
		t.Fatalf("endpoint = %s %q, want ready", e.Status, e.PlacementError)
	}
	rt, ok := f.route(t, "fraud-ep")
	if !ok || len(rt.Versions) != 1 || len(rt.Versions[0].Replicas) != 1 {
		t.Fatalf("route = %+v, want the moved replica", rt)
	}
}
