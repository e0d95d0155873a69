package process

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/quartz"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"modelplane/agent"
	"modelplane/bus"
	"modelplane/busapi"
	"modelplane/internal/natstest"
	"modelplane/internal/wait"
)

// agentEnv is one test's NATS with the contract's buckets.
func agentEnv(t *testing.T) (*nats.Conn, jetstream.KeyValue) {
	t.Helper()
	_, nc := natstest.Connect(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := bus.Ensure(ctx, js); err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, busapi.BucketDesired)
	if err != nil {
		t.Fatal(err)
	}
	return nc, kv
}

func putDesired(t *testing.T, kv jetstream.KeyValue, node string, gen int64, specs ...busapi.ReplicaSpec) {
	t.Helper()
	data, err := json.Marshal(busapi.Desired{Node: node, Generation: gen, Replicas: specs})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(t.Context(), node, data); err != nil {
		t.Fatal(err)
	}
}

func startAgent(t *testing.T, nc *nats.Conn, node, stateDir string, d *Driver) *agent.Agent {
	t.Helper()
	inv, err := agent.ParseInventory([]string{"2xA100-80GB"}, "")
	if err != nil {
		t.Fatal(err)
	}
	a, err := agent.New(agent.Config{Node: node, GPUs: inv, StateDir: stateDir, Lease: 2 * time.Second, Heartbeat: 250 * time.Millisecond, Driver: d},
		nc, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Stop)
	return a
}

func replicaStatus(a *agent.Agent, id string) busapi.ReplicaStatus {
	for _, r := range a.Status().Replicas {
		if r.ID == id {
			return r
		}
	}
	return busapi.ReplicaStatus{}
}

func TestRestartedAgentAdoptsItsRuntimesWithoutRestarting(t *testing.T) {
	t.Parallel()
	nc, kv := agentEnv(t)
	agentState, driverState := t.TempDir(), t.TempDir()
	d1 := newDriver(t, driverState, quartz.NewMock(t), nil)
	a1 := startAgent(t, nc, "cpu-1", agentState, d1)
	putDesired(t, kv, "cpu-1", 1, spec("r-agent"))
	wait.Eventually(t, long, func() bool { return replicaStatus(a1, "r-agent").State == busapi.StateReady },
		"replica never ready: %v", wait.Show(func() any { return a1.Status().Replicas }))
	rs := replicaStatus(a1, "r-agent")
	pid := envOf(t, runningReplica(d1, "r-agent")).PID
	a1.Stop()
	d1.detach()

	d2 := newDriver(t, driverState, quartz.NewMock(t), nil)
	a2 := startAgent(t, nc, "cpu-1", agentState, d2)
	if got := replicaStatus(a2, "r-agent"); got.State != busapi.StateReady || got.Addr != rs.Addr {
		// The first heartbeat of the new agent already routes to it.
		wait.Eventually(t, long, func() bool { return replicaStatus(a2, "r-agent").State == busapi.StateReady },
			"adopted replica never ready: %v", wait.Show(func() any { return a2.Status().Replicas }))
	}
	c := a2.Counters()
	if c.ReplicaAdoptions != 1 || c.ReplicaStarts != 0 {
		t.Errorf("restarted agent: adoptions %d starts %d, want 1 and 0", c.ReplicaAdoptions, c.ReplicaStarts)
	}
	if got := envOf(t, runningReplica(d2, "r-agent")).PID; got != pid {
		t.Errorf("pid after the agent's restart = %d, want %d", got, pid)
	}
	if got := replicaStatus(a2, "r-agent").Addr; got != rs.Addr {
		t.Errorf("addr after the restart = %s, want %s", got, rs.Addr)
	}
}

func TestAgentReportsACrashingRuntimeFailedWithItsReason(t *testing.T) {
	t.Parallel()
	nc, kv := agentEnv(t)
	// The driver's backoff is on a clock nothing moves: the runtime fails
	// twice (the second start is at once), then waits.
	d := newDriver(t, t.TempDir(), quartz.NewMock(t), nil, "-crash")
	a := startAgent(t, nc, "cpu-2", t.TempDir(), d)
	putDesired(t, kv, "cpu-2", 1, spec("r-crashes"))
	wait.Eventually(t, long, func() bool { return replicaStatus(a, "r-crashes").Failures == 2 },
		"failures never reached 2: %v", wait.Show(func() any { return a.Status().Replicas }))
	rs := replicaStatus(a, "r-crashes")
	if rs.State != busapi.StateFailed || !strings.Contains(rs.Reason, "exit status 3") {
		t.Errorf("heartbeat of a crashing replica = %+v, want failed with the exit status", rs)
	}
}

// TestHeartbeatCarriesInFlightAndBatch: what the runtime's metrics say of
// its in-flight requests and its mean batch reaches the agent's heartbeat.
func TestHeartbeatCarriesInFlightAndBatch(t *testing.T) {
	t.Parallel()
	nc, kv := agentEnv(t)
	hold := filepath.Join(openDir(t), "release")
	d := newDriver(t, t.TempDir(), quartz.NewMock(t), nil, "-hold-file", hold)
	a := startAgent(t, nc, "cpu-3", t.TempDir(), d)
	putDesired(t, kv, "cpu-3", 1, spec("r-load"))
	wait.Eventually(t, long, func() bool { return replicaStatus(a, "r-load").State == busapi.StateReady },
		"replica never ready: %v", wait.Show(func() any { return a.Status().Replicas }))
	addr := replicaStatus(a, "r-load").Addr
	const n = 3
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() { _, _ = predict(addr) })
	}
	wait.Eventually(t, long, func() bool { return replicaStatus(a, "r-load").InFlight == n },
		"heartbeat never showed %d in flight: %v", n, wait.Show(func() any { return replicaStatus(a, "r-load") }))
	if err := os.WriteFile(hold, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	wait.Eventually(t, long, func() bool {
		rs := replicaStatus(a, "r-load")
		return rs.InFlight == 0 && rs.Requests == n && rs.BatchSize == 2
	}, "heartbeat never showed the requests answered with batch 2: %v", wait.Show(func() any { return replicaStatus(a, "r-load") }))
}
