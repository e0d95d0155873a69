package ingest_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/coder/quartz"

	"modelplane/artifact"
	"modelplane/auth"
	"modelplane/billing"
	"modelplane/busapi"
	"modelplane/db"
	"modelplane/endpoint"
	"modelplane/fleet"
	"modelplane/internal/pgtest"
	"modelplane/registry"
)

// TestUsageAttributedByAllocations places real replicas (a GPU one of team
// risk and a CPU one of 2 cores) through the fleet in PostgreSQL, so that
// placement leaves its allocation intervals, and runs the real consumer on
// them: every second is billed to the allocation's owner whatever the agent
// labels it, usage that arrives after its replica is gone is still billed
// by its interval, and usage no interval covers is dropped and counted.
func TestUsageAttributedByAllocations(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.New(t)
	q := db.New(pool)
	store, err := artifact.NewStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	reg := registry.New(pool, store, artifact.Limits{})
	tm, err := q.TeamCreate(ctx, db.TeamCreateParams{Name: "risk"})
	if err != nil {
		t.Fatal(err)
	}
	eng := &auth.Principal{Name: "eng@example.com", Via: "session", Teams: []auth.Membership{{TeamID: tm.ID, Team: "risk", Role: auth.RoleAdmin}}}
	man := []byte(`{"model.onnx":"` + strings.Repeat("ab", 32) + `"}`)
	for _, m := range []struct {
		model, version, runtime, format string
		res                             registry.Resources
	}{
		{"fraud", "v1", "triton", "onnx", registry.Resources{GPUCount: 1, GPUMemoryMB: 4096}},
		{"xgb", "x1", "xgboost", "xgboost-json", registry.Resources{CPUCores: 2, MemoryMB: 2048}},
	} {
		if _, err := reg.CreateModel(ctx, eng, registry.ModelSpec{Team: "risk", Name: m.model, Task: registry.TaskClassification}); err != nil {
			t.Fatal(err)
		}
		if _, err := reg.RegisterVersion(ctx, eng, m.model, registry.VersionSpec{Name: m.version, Runtime: m.runtime, Format: m.format,
			ArtifactURI: "s3://models/" + m.model, Resources: m.res}, man, nil); err != nil {
			t.Fatal(err)
		}
	}
	fl := fleet.New(pool, fleet.Options{Clock: quartz.NewReal(), Log: slog.New(slog.DiscardHandler)})
	watching := time.Now()
	if _, err := fl.Observe(ctx, busapi.NodeStatus{Node: "gpu-a", BootID: "b", LeaseSeconds: 15, GPUs: []busapi.GPU{
		{Index: 0, Type: "A100-80GB", MemoryMB: 81920, Slices: []busapi.Slice{{Index: 0, Profile: busapi.ProfileFull}}},
		{Index: 1, Type: "A100-80GB", MemoryMB: 81920, Slices: []busapi.Slice{{Index: 0, Profile: busapi.ProfileFull}}},
	}}); err != nil {
		t.Fatal(err)
	}
	if _, err := fl.Observe(ctx, busapi.NodeStatus{Node: "cpu-a", BootID: "b", LeaseSeconds: 15, CPUCores: 4, MemoryMB: 8192}); err != nil {
		t.Fatal(err)
	}
	eps := endpoint.New(pool)
	for _, e := range []struct{ name, model, version, profile string }{{"fraud-ep", "fraud", "v1", "gpu-a100-80gb"}, {"xgb-ep", "xgb", "x1", ""}} {
		if _, err := eps.Create(ctx, eng, endpoint.Spec{Name: e.name, Model: e.model, Version: e.version,
			Settings: endpoint.Settings{InstanceProfile: e.profile, MinReplicas: 1, MaxReplicas: 1, Tier: "standard", RetentionDays: 30}}); err != nil {
			t.Fatal(err)
		}
	}
	if p, err := fl.Reconcile(ctx, watching); err != nil || p.Placed != 2 {
		t.Fatalf("reconcile = %+v, %v; want both replicas placed", p, err)
	}
	// Placement left one interval per GPU slot and one per CPU replica.
	var gpuRep, cpuRep string
	var gpu int
	var during int64 // a second both were allocated in
	ivs, err := pool.Query(ctx, "SELECT replica, gpu, cpu_cores, team, endpoint, started_at FROM allocation_intervals WHERE ended_at IS NULL")
	if err != nil {
		t.Fatal(err)
	}
	for ivs.Next() {
		var rep, team, ep string
		var g, cores int32
		var started time.Time
		if err := ivs.Scan(&rep, &g, &cores, &team, &ep, &started); err != nil {
			t.Fatal(err)
		}
		during = max(during, started.Unix())
		switch {
		case ep == "fraud-ep" && cores == 0 && team == "risk" && gpuRep == "":
			gpuRep, gpu = rep, int(g)
		case ep == "xgb-ep" && cores == 2 && team == "risk" && cpuRep == "":
			cpuRep = rep
		default:
			t.Errorf("interval of %s (gpu %d, %d cores) for %s/%s; want one each for fraud-ep and xgb-ep", rep, g, cores, team, ep)
		}
	}
	if ivs.Err() != nil || gpuRep == "" || cpuRep == "" {
		t.Fatalf("open intervals: gpu replica %q, cpu replica %q, %v", gpuRep, cpuRep, ivs.Err())
	}

	e := newEnv(t, nil, 0)
	cfg := e.usageConfig(t, e.js)
	cfg.LoadAllocations = billing.LoadAllocations(q)
	u := e.start(t, cfg)
	// What agent gpu-a and agent cpu-a say: the right slots and replicas,
	// labelled as another team's endpoint on a dearer GPU.
	forged := func(r busapi.Usage) busapi.Usage {
		r.Team, r.Endpoint, r.Model, r.Version = "search", "chat", "llama", "v9"
		if r.GPUType != busapi.CPUType {
			r.GPUType, r.Profile = "H100-80GB", "mig-3g.40gb"
		}
		return r
	}
	send := func(id, node string, recs ...busapi.Usage) {
		t.Helper()
		for i := range recs {
			recs[i].Node = node
		}
		e.publish(t, e.js, busapi.UsageBatch{ID: id, Node: node, Records: recs})
	}
	send("gpu-1", "gpu-a",
		forged(busapi.Usage{Time: during, GPU: gpu, Replica: gpuRep, UtilPct: 50, Requests: 7}),
		// A slot with no allocation, and the allocated slot claimed for
		// another replica.
		forged(busapi.Usage{Time: during, GPU: 1 - gpu, Replica: gpuRep}),
		forged(busapi.Usage{Time: during, GPU: gpu, Replica: "someone-else"}))
	send("cpu-1", "cpu-a",
		forged(busapi.Usage{Time: during, GPUType: busapi.CPUType, Profile: busapi.ProfileCPU, Slice: 0, Replica: cpuRep}),
		// A third core of a 2-core replica.
		forged(busapi.Usage{Time: during, GPUType: busapi.CPUType, Profile: busapi.ProfileCPU, Slice: 2, Replica: cpuRep}))
	e.waitDrained(t, "", 30*time.Second)

	// Both endpoints are deleted: the replicas and their allocations go.
	for _, name := range []string{"fraud-ep", "xgb-ep"} {
		if err := eps.Delete(ctx, eng, name); err != nil {
			t.Fatal(err)
		}
	}
	if p, err := fl.Reconcile(ctx, watching); err != nil {
		t.Fatalf("reconcile = %+v, %v", p, err)
	}
	var ended time.Time
	if err := pool.QueryRow(ctx, "SELECT max(ended_at) FROM allocation_intervals WHERE ended_at IS NOT NULL").Scan(&ended); err != nil {
		t.Fatalf("intervals not closed by the delete: %v", err)
	}
	// Late: another batch of the second they were allocated in, spooled by
	// the agent and arriving now (the second core's, billed; the GPU's
	// again, a repeat never billed twice); and seconds after the
	// allocations ended.
	after := ended.Unix() + 2
	send("gpu-2", "gpu-a",
		forged(busapi.Usage{Time: during, GPU: gpu, Replica: gpuRep, Requests: 3}),
		forged(busapi.Usage{Time: after, GPU: gpu, Replica: gpuRep}))
	send("cpu-2", "cpu-a",
		forged(busapi.Usage{Time: during, GPUType: busapi.CPUType, Profile: busapi.ProfileCPU, Slice: 1, Replica: cpuRep}),
		forged(busapi.Usage{Time: after, GPUType: busapi.CPUType, Profile: busapi.ProfileCPU, Slice: 0, Replica: cpuRep}))
	e.waitDrained(t, "", 30*time.Second)

	rows, err := e.ch.Query(ctx, `SELECT node, ts, gpu, slice, gpu_type, profile, team, endpoint, model, version, replica, requests, row_idx, batch_id
		FROM gpu_usage ORDER BY batch_id, row_idx`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []string
	for rows.Next() {
		var (
			node, gpuType, profile, team, ep, model, version, replica, batch string
			ts                                                               time.Time
			g, s                                                             uint16
			requests                                                         uint64
			idx                                                              uint32
		)
		if err := rows.Scan(&node, &ts, &g, &s, &gpuType, &profile, &team, &ep, &model, &version, &replica, &requests, &idx, &batch); err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%s/%d %s t+%d %d/%d %s %s %s %s %s %s req=%d", batch, idx, node, ts.Unix()-during, g, s,
			gpuType, profile, team, ep, model, version, requests))
		if replica != gpuRep && replica != cpuRep {
			t.Errorf("row %s/%d of replica %q", batch, idx, replica)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"cpu-1/0 cpu-a t+0 0/0 cpu cpu-core risk xgb-ep xgb x1 req=0",
		"cpu-2/0 cpu-a t+0 0/1 cpu cpu-core risk xgb-ep xgb x1 req=0",
		fmt.Sprintf("gpu-1/0 gpu-a t+0 %d/0 A100-80GB full risk fraud-ep fraud v1 req=7", gpu),
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("gpu_usage rows:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// Dropped: the unallocated GPU, the third core, and the two seconds
	// after the end (unallocated); the slot claimed for another replica
	// (foreign); the GPU's second billed again (repeated).
	if s := u.Stats(); s.UnallocatedRows != 4 || s.ForeignRows != 1 || s.RepeatedRows != 1 {
		t.Errorf("dropped %d unallocated, %d foreign, %d repeated rows; want 4, 1 and 1", s.UnallocatedRows, s.ForeignRows, s.RepeatedRows)
	}
}

// TestUsageWithoutAllocationsIsNotBilled: a consumer whose allocation
// table is empty stores nothing, however the usage is labelled.
func TestUsageWithoutAllocationsIsNotBilled(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, 0)
	cfg := e.usageConfig(t, e.js)
	cfg.LoadAllocations = billing.LoadAllocations(db.New(pgtest.New(t)))
	u := e.start(t, cfg)
	e.publish(t, e.js, nodeSecond("n-1", 0, 4))
	e.waitDrained(t, "", 30*time.Second)
	var n uint64
	if err := e.ch.QueryRow(context.Background(), "SELECT count() FROM gpu_usage").Scan(&n); err != nil || n != 0 {
		t.Fatalf("gpu_usage holds %d rows (%v); want none", n, err)
	}
	if s := u.Stats(); s.UnallocatedRows != 6 || s.Batches != 1 {
		t.Fatalf("stats %+v; want the 6 rows dropped as unallocated and the message acked", s)
	}
}
