package fleet_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"modelplane/agent"
	"modelplane/artifact"
	"modelplane/bus"
	"modelplane/busapi"
	"modelplane/db"
	"modelplane/endpoint"
	"modelplane/fleet"
	"modelplane/internal/natstest"
	"modelplane/internal/wait"
	"modelplane/registry"
)

// cpuVersion registers model xgb, version x1, an XGBoost model that needs
// no GPU: 2 cores and 2048 MiB a replica.
func (f *fixture) cpuVersion(t *testing.T) {
	t.Helper()
	store, err := artifact.NewStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	reg := registry.New(f.pool, store, artifact.Limits{})
	if _, err := reg.CreateModel(t.Context(), f.eng, registry.ModelSpec{Team: "risk", Name: "xgb", Task: registry.TaskClassification}); err != nil {
		t.Fatal(err)
	}
	man := []byte(`{"model.json":"` + strings.Repeat("ab", 32) + `"}`)
	if _, err := reg.RegisterVersion(t.Context(), f.eng, "xgb", registry.VersionSpec{Name: "x1", Runtime: "xgboost", Format: "xgboost-json",
		ArtifactURI: "s3://models/xgb/x1", Resources: registry.Resources{CPUCores: 2, MemoryMB: 2048}}, man, nil); err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) cpuHeartbeat(t *testing.T, node string, cores, memoryMB int, reps ...busapi.ReplicaStatus) {
	t.Helper()
	if _, err := f.fleet.Observe(t.Context(), busapi.NodeStatus{Node: node, BootID: "b1", LeaseSeconds: 15, CPUCores: cores, MemoryMB: memoryMB,
		Replicas: reps}); err != nil {
		t.Fatal(err)
	}
}

// TestCPUAgentHeartbeatIsAccepted runs a real CPU agent (no GPUs) against
// the intake over NATS: the node is registered with its cores and memory.
func TestCPUAgentHeartbeatIsAccepted(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	_, nc := natstest.Connect(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := bus.Ensure(ctx, js); err != nil {
		t.Fatal(err)
	}
	in := fleet.NewIntake(f.fleet, nc, slog.New(slog.DiscardHandler), nil)
	if err := in.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(in.Stop)
	a, err := agent.New(agent.Config{Node: "cpu-agent", CPUCores: 16, MemoryMB: 65536, StateDir: t.TempDir(),
		Lease: 2 * time.Second, Heartbeat: 250 * time.Millisecond}, nc, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Stop)
	var n db.Node
	wait.Eventually(t, 10*time.Second, func() bool {
		n, err = db.New(f.pool).NodeGet(t.Context(), "cpu-agent")
		return err == nil
	}, "the CPU agent's node was never registered: %v", wait.Show(func() any { return err }))
	if n.CPUCores != 16 || n.MemoryMB != 65536 || n.State != "ready" || string(n.Inventory) != "[]" {
		t.Errorf("node = %d cores, %d MiB, state %s, inventory %s; want 16, 65536, ready, []", n.CPUCores, n.MemoryMB, n.State, n.Inventory)
	}
}

func TestIntakeRefusesBadCPUInventory(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	for name, st := range map[string]busapi.NodeStatus{
		"neither GPUs nor cores":     {Node: "n1", LeaseSeconds: 15},
		"negative cores":             {Node: "n2", LeaseSeconds: 15, CPUCores: -4, MemoryMB: 4096},
		"cores without memory":       {Node: "n3", LeaseSeconds: 15, CPUCores: 4},
		"GPUs and a CPU inventory":   {Node: "n4", LeaseSeconds: 15, CPUCores: 4, MemoryMB: 4096, GPUs: gpus(0, 1, "A100-80GB", nil)},
		"more cores than any server": {Node: "n5", LeaseSeconds: 15, CPUCores: 1 << 20, MemoryMB: 4096},
	} {
		if _, err := f.fleet.Observe(t.Context(), st); !errors.Is(err, fleet.ErrBadStatus) {
			t.Errorf("%s: Observe error = %v, want ErrBadStatus", name, err)
		}
	}
}

// TestCPUVersionPlacedOnCPUNodesByCores: a gpu_count 0 version goes to the
// CPU node by its cores and memory, never to the free GPUs beside it, and
// the replicas that the cores cannot hold stay unplaced with the reason.
func TestCPUVersionPlacedOnCPUNodesByCores(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.cpuVersion(t)
	f.heartbeat(t, "gpu-node", gpus(0, 4, "A100-80GB", nil))
	f.cpuHeartbeat(t, "cpu-node", 8, 65536)
	_, err := f.eps.Create(t.Context(), f.eng, endpoint.Spec{Name: "xgb-ep", Model: "xgb", Version: "x1",
		Settings: endpoint.Settings{MinReplicas: 3, MaxReplicas: 5, Tier: "standard", RetentionDays: 30}})
	if err != nil {
		t.Fatal(err)
	}
	if e := f.get(t, "xgb-ep"); e.InstanceProfile != endpoint.ProfileCPU || e.Runtime != "xgboost" {
		t.Fatalf("endpoint profile %q runtime %q; want cpu and the version's xgboost", e.InstanceProfile, e.Runtime)
	}
	// A GPU version beside it still gets its GPU, never the CPU node.
	f.endpoint(t, "fraud-ep", "fraud", "v1", "gpu-a100-80gb", "standard", 1)

	if p := f.reconcile(t); p.Placed != 4 || p.Unplaced != 0 {
		t.Fatalf("pass = %+v, want 4 placed", p)
	}
	dc, dg := f.desired(t, "cpu-node"), f.desired(t, "gpu-node")
	if len(dc.Replicas) != 3 {
		t.Fatalf("cpu-node desired = %+v, want the 3 xgb replicas", dc)
	}
	for _, r := range dc.Replicas {
		if r.Endpoint != "xgb-ep" || r.GPUType != busapi.CPUType || r.Profile != busapi.ProfileCPU || len(r.Slots) != 0 ||
			r.CPUCores != 2 || r.MemoryMB != 2048 {
			t.Errorf("cpu replica = %+v, want xgb-ep on 2 cores and 2048 MiB, no GPU slots", r)
		}
	}
	if len(dg.Replicas) != 1 || dg.Replicas[0].Endpoint != "fraud-ep" || dg.Replicas[0].CPUCores != 0 {
		t.Fatalf("gpu-node desired = %+v, want only fraud-ep", dg)
	}
	e := f.get(t, "xgb-ep")
	for _, r := range e.Replicas {
		if r.Node != "cpu-node" || r.GPUType != busapi.CPUType || r.Profile != busapi.ProfileCPU {
			t.Errorf("replica %+v, want it on cpu-node as cpu / cpu-core", r)
		}
	}

	// Five replicas need 10 cores; the node has 8: the fifth waits.
	if _, err := f.eps.Update(t.Context(), f.eng, "xgb-ep", endpoint.Settings{InstanceProfile: endpoint.ProfileCPU, MinReplicas: 5,
		MaxReplicas: 5, Tier: "standard", RetentionDays: 30}); err != nil {
		t.Fatal(err)
	}
	if p := f.reconcile(t); p.Placed != 1 || p.Unplaced != 1 {
		t.Fatalf("pass = %+v, want 1 placed and 1 unplaced", p)
	}
	if dc := f.desired(t, "cpu-node"); len(dc.Replicas) != 4 {
		t.Fatalf("cpu-node desired has %d replicas, want 4 (8 cores)", len(dc.Replicas))
	}
	if dg := f.desired(t, "gpu-node"); len(dg.Replicas) != 1 {
		t.Fatalf("gpu-node desired has %d replicas; the CPU version must not spill onto GPUs", len(dg.Replicas))
	}
	if e := f.get(t, "xgb-ep"); !strings.Contains(e.PlacementError, "no CPU node with 2 free cores and 2048 MiB of free memory") {
		t.Errorf("placement error = %q, want the cores that ran out", e.PlacementError)
	}

	// A second CPU node takes the fifth; a node restarted with fewer cores
	// loses its allocations and they are placed again within the new size.
	f.cpuHeartbeat(t, "cpu-node-2", 4, 8192)
	if p := f.reconcile(t); p.Placed != 1 || p.Unplaced != 0 {
		t.Fatalf("pass with a second CPU node = %+v, want the fifth placed", p)
	}
	f.cpuHeartbeat(t, "cpu-node", 4, 65536)
	if p := f.reconcile(t); p.Placed != 3 || p.Unplaced != 1 {
		t.Fatalf("pass after cpu-node shrank to 4 cores = %+v, want 3 placed (2 + 1) and 1 unplaced", p)
	}
}
