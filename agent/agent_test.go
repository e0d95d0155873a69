package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"modelplane/bus"
	"modelplane/busapi"
	"modelplane/internal/natstest"
	"modelplane/internal/wait"
)

func TestDesiredStateReconciles(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	drv := newCountingDriver(t)
	a := start(t, testConfig(t, "node-desired", drv), e.nc)

	e.put(t, "node-desired", 1, classifier("r1", 0), classifier("r2", 1))
	addrs := allReady(t, a, "r1", "r2")
	if got := drv.starts.Load(); got != 2 {
		t.Fatalf("starts = %d, want 2", got)
	}

	// A change stops and starts only the difference.
	e.put(t, "node-desired", 2, classifier("r2", 1), classifier("r3", 0))
	after := allReady(t, a, "r2", "r3")
	if after["r2"] != addrs["r2"] {
		t.Errorf("r2 moved from %s to %s; an unchanged replica must keep running", addrs["r2"], after["r2"])
	}
	wait.Eventually(t, 10*time.Second, func() bool { return httpGet(addrs["r1"], "/v2/health/live") == 0 },
		"r1 still answers after leaving the desired set")
	if got, c := drv.starts.Load(), a.Counters(); got != 3 || c.ReplicaStops != 1 {
		t.Fatalf("starts = %d, stops = %d; want 3 and 1", got, c.ReplicaStops)
	}
	if g := a.Status().Generation; g != 2 {
		t.Fatalf("generation %d, want 2", g)
	}

	// A stale generation and a replayed one change nothing.
	for i, d := range []struct {
		gen   int64
		specs []busapi.ReplicaSpec
	}{
		{1, []busapi.ReplicaSpec{classifier("r9", 3)}},
		{2, []busapi.ReplicaSpec{classifier("r2", 1), classifier("r3", 0)}},
		{2, nil},
	} {
		ignored := a.Counters().DesiredIgnored
		e.put(t, "node-desired", d.gen, d.specs...)
		wait.Eventually(t, 10*time.Second, func() bool { return a.Counters().DesiredIgnored == ignored+1 },
			"put %d (generation %d) not seen yet", i, d.gen)
		if got, c := drv.starts.Load(), a.Counters(); got != 3 || c.ReplicaStops != 1 {
			t.Fatalf("after generation %d again: starts = %d, stops = %d; want 3 and 1", d.gen, got, c.ReplicaStops)
		}
		allReady(t, a, "r2", "r3")
	}

	// A deleted key stops everything.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := e.kv.Delete(ctx, "node-desired"); err != nil {
		t.Fatal(err)
	}
	wait.Eventually(t, 10*time.Second, func() bool { return len(replicas(a)) == 0 && a.Counters().ReplicaStops == 3 },
		"after delete: replicas %v, want none and 3 stops: %v", wait.Show(func() any { return replicas(a) }),
		wait.Show(func() any { return a.Counters() }))
	for _, addr := range after {
		wait.Eventually(t, 10*time.Second, func() bool { return httpGet(addr, "/v2/health/live") == 0 },
			"%s still answers after the key was deleted", addr)
	}
}

func TestHeartbeatReportsInventoryAndUse(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := testConfig(t, "node-hb", nil)
	cfg.GPUs = inventory(t, "1xA100-80GB,1xH100-80GB", "1:3g.40gb+4g.40gb")
	beats := make(chan busapi.NodeStatus, 64)
	sub, err := e.nc.Subscribe(busapi.NodeStatusSubject("node-hb"), func(m *nats.Msg) {
		var st busapi.NodeStatus
		if json.Unmarshal(m.Data, &st) == nil {
			select {
			case beats <- st:
			default:
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	llm := busapi.ReplicaSpec{ID: "chat-1", Team: "support", Endpoint: "chat", Model: "llama", Version: "v1",
		Task: "llm", GPUType: "H100-80GB", Profile: "mig-4g.40gb", Slots: []busapi.Slot{{GPU: 1, Slice: 1}}, Sim: json.RawMessage(llmSim)}
	e.put(t, "node-hb", 7, classifier("clf-1", 0), llm)
	a := start(t, cfg, e.nc)
	allReady(t, a, "clf-1", "chat-1")

	deadline := time.After(10 * time.Second)
	for {
		var st busapi.NodeStatus
		select {
		case st = <-beats:
		case <-deadline:
			t.Fatal("no heartbeat with both replicas ready")
		}
		if len(st.Replicas) != 2 || st.Replicas[0].State != busapi.StateReady || st.Replicas[1].State != busapi.StateReady {
			continue
		}
		if st.Node != "node-hb" || st.BootID != a.BootID() || st.LeaseSeconds != 2 || st.Generation != 7 {
			t.Fatalf("heartbeat header: %+v", st)
		}
		if len(st.GPUs) != 2 || st.GPUs[0].Type != "A100-80GB" || st.GPUs[1].Type != "H100-80GB" || !st.GPUs[1].MIG || len(st.GPUs[1].Slices) != 2 {
			t.Fatalf("inventory: %+v", st.GPUs)
		}
		// Predictors hold 30% of their slot, LLM runtimes 90%.
		if got, want := st.GPUs[0].MemoryUsedMB, 81920*3/10; got != want {
			t.Errorf("gpu 0 memory used %d, want %d", got, want)
		}
		if got, want := st.GPUs[1].MemoryUsedMB, 40960*9/10; got != want {
			t.Errorf("gpu 1 memory used %d, want %d", got, want)
		}
		if st.Replicas[0].ID != "chat-1" || !strings.HasPrefix(st.Replicas[0].Addr, "127.0.0.1:") {
			t.Errorf("replicas sorted by id with addresses: %+v", st.Replicas)
		}
		return
	}
}

func TestReplicaThatCannotStartFailsWithReasonAndBacksOff(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	drv := newCountingDriver(t)
	clk := newClock(t)
	cfg := testConfig(t, "node-fail", drv)
	cfg.Clock = clk
	a := start(t, cfg, e.nc)

	bad := classifier("bad-profile", 0)
	bad.Sim = json.RawMessage(`{"no_such_key":1}`)
	nowhere := classifier("no-gpu", 9)
	clash := classifier("clash", 1)
	e.put(t, "node-fail", 1, bad, classifier("good", 1), nowhere, clash)

	allReadyOrFailed := func() error {
		rs := replicas(a)
		if rs["good"].State != busapi.StateReady {
			return fmt.Errorf("good: %+v", rs["good"])
		}
		for id, want := range map[string]string{"bad-profile": "no_such_key", "no-gpu": "gpu 9 does not exist", "clash": "already replica good's"} {
			if r := rs[id]; r.State != busapi.StateFailed || !strings.Contains(r.Reason, want) {
				return fmt.Errorf("%s: %+v, want failed saying %q", id, r, want)
			}
		}
		return nil
	}
	failures := func() uint64 { return a.Counters().ReplicaStartFailures }
	// The desired state is applied at once: good starts, the bad profile
	// fails its first attempt, the others do not fit. The clock has not
	// moved yet.
	wait.Eventually(t, 10*time.Second, func() bool {
		r := replicas(a)["good"]
		return failures() == 1 && r.Addr != "" && httpGet(r.Addr, "/v2/health/ready") == http.StatusOK
	}, "want good started and one failed start: %v", wait.Show(func() any { return a.Counters() }))
	// Just short of a second the agent has seen good ready (its readiness
	// check is due every 200 ms) and has not tried the bad profile again.
	advance(t, clk, time.Second-time.Millisecond)
	var why error
	wait.Eventually(t, 10*time.Second, func() bool { why = allReadyOrFailed(); return why == nil }, "%v", wait.Show(func() any { return why }))
	if got := failures(); got != 1 {
		t.Fatalf("start failures before the first backoff of 1 s ended = %d, want 1", got)
	}
	// Backoff 1 s, 2 s, 4 s…: each retry exactly when its backoff ends,
	// never earlier; never a hot loop. The clock stands 1 ms short of the
	// end of each backoff in turn.
	for i, backoff := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second} {
		advance(t, clk, time.Millisecond)
		want := uint64(i + 2)
		wait.Eventually(t, 10*time.Second, func() bool { return failures() == want },
			"start failures %v when the backoff of %v ended, want %d", wait.Show(func() any { return failures() }), backoff, want)
		advance(t, clk, 2*backoff-time.Millisecond)
		if got := failures(); got != want {
			t.Fatalf("start failures 1 ms before the backoff of %v ended = %d, want still %d", 2*backoff, got, want)
		}
	}
	// Slots that do not fit are never tried: only good and the bad
	// profile's attempts reach the driver.
	if got := drv.starts.Load(); got != 1+int64(failures()) {
		t.Errorf("driver starts = %d, want good's and %d of the bad profile", got, failures())
	}
	if err := allReadyOrFailed(); err != nil {
		t.Fatal(err)
	}
}

func TestRestartAdoptsRunningReplicas(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	drv := newCountingDriver(t)
	cfg := testConfig(t, "node-adopt", drv)
	e.put(t, "node-adopt", 3, classifier("a1", 0), classifier("a2", 1))
	first, err := New(cfg, e.nc, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	before := allReady(t, first, "a1", "a2")
	first.Stop()
	for id, addr := range before {
		if code := httpGet(addr, "/v2/health/ready"); code != http.StatusOK {
			t.Fatalf("%s stopped with its agent: %d", id, code)
		}
	}

	// Same driver, as in one process: the new agent takes the replicas
	// over and the replayed generation 3 changes nothing.
	second := start(t, cfg, e.nc)
	after := allReady(t, second, "a1", "a2")
	wait.Eventually(t, 10*time.Second, func() bool { return second.Counters().DesiredIgnored == 1 },
		"the replayed desired state was not seen yet")
	if got := drv.starts.Load(); got != 2 {
		t.Fatalf("driver starts = %d, want the first agent's 2 only", got)
	}
	if c := second.Counters(); c.ReplicaAdoptions != 2 || c.ReplicaStarts != 0 || c.ReplicaStops != 0 {
		t.Fatalf("second agent: %+v", c)
	}
	for id := range before {
		if before[id] != after[id] {
			t.Errorf("%s moved from %s to %s", id, before[id], after[id])
		}
	}
	if second.BootID() == first.BootID() {
		t.Error("a new run must have a new boot id")
	}
}

func TestFreshProcessAdoptsLiveReplicasByProbe(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	old := newCountingDriver(t)
	cfg := testConfig(t, "node-probe", old)
	e.put(t, "node-probe", 1, classifier("p1", 0), classifier("p2", 2))
	first, err := New(cfg, e.nc, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	before := allReady(t, first, "p1", "p2")
	first.Stop()

	// A new driver knows nothing: the state file's addresses still answer
	// as the same replicas, so they are adopted, not started twice.
	fresh := newCountingDriver(t)
	cfg.Driver = fresh
	second := start(t, cfg, e.nc)
	after := allReady(t, second, "p1", "p2")
	if fresh.starts.Load() != 0 || fresh.adopts.Load() != 2 {
		t.Fatalf("fresh driver: %d starts, %d adoptions; want 0 and 2", fresh.starts.Load(), fresh.adopts.Load())
	}
	for id := range before {
		if before[id] != after[id] {
			t.Errorf("%s: %s then %s", id, before[id], after[id])
		}
	}
}

func TestFreshProcessRestartsGoneReplicas(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	old := newCountingDriver(t)
	cfg := testConfig(t, "node-gone", old)
	e.put(t, "node-gone", 1, classifier("g1", 0), classifier("g2", 1))
	first, err := New(cfg, e.nc, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	before := allReady(t, first, "g1", "g2")
	first.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	old.Close(ctx) // the process died with its replicas

	fresh := newCountingDriver(t)
	cfg.Driver = fresh
	second := start(t, cfg, e.nc)
	after := allReady(t, second, "g1", "g2")
	if got := fresh.starts.Load(); got != 2 {
		t.Fatalf("fresh driver starts = %d, want 2", got)
	}
	for id := range before {
		if before[id] != after[id] {
			t.Errorf("%s restarted on %s, want its old address %s", id, after[id], before[id])
		}
	}
}

func TestNATSDownReplicasKeepServing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := start(t, testConfig(t, "node-outage", nil), e.nc)
	e.put(t, "node-outage", 1, classifier("o1", 0))
	addrs := allReady(t, a, "o1")

	e.srv.Shutdown()
	// The replica serves while heartbeats fail, checked again and again
	// until three heartbeats in a row have failed.
	failed := a.Counters().HeartbeatsFailed
	wait.Eventually(t, 10*time.Second, func() bool {
		if code := httpGet(addrs["o1"], "/v2/health/ready"); code != http.StatusOK {
			t.Fatalf("replica answers %d while NATS is down", code)
		}
		predict(t, addrs["o1"])
		return a.Counters().HeartbeatsFailed >= failed+3
	}, "heartbeats failed %v, want %d more while NATS is down", wait.Show(func() any { return a.Counters().HeartbeatsFailed }), 3)
	c := a.Counters()
	if c.ReplicaStops != 0 || replicas(a)["o1"].State != busapi.StateReady {
		t.Fatalf("losing NATS must stop nothing: %+v, %+v", c, replicas(a))
	}

	e.srv.Restart()
	sent := a.Counters().HeartbeatsSent
	wait.Eventually(t, 10*time.Second, func() bool { return a.Counters().HeartbeatsSent > sent },
		"no heartbeat since NATS came back")
	// The desired-state watch survives the outage.
	var putErr error
	wait.Eventually(t, 10*time.Second, func() bool {
		data, _ := json.Marshal(busapi.Desired{Node: "node-outage", Generation: 2, Replicas: []busapi.ReplicaSpec{classifier("o1", 0), classifier("o2", 1)}})
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, putErr = e.kv.Put(ctx, "node-outage", data)
		return putErr == nil
	}, "desired state not written after the outage: %v", wait.Show(func() any { return putErr }))
	allReady(t, a, "o1", "o2")
}

func TestAgentStartsFromItsStateFileWithoutNATS(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	drv := newCountingDriver(t)
	cfg := testConfig(t, "node-offline", drv)
	e.put(t, "node-offline", 1, classifier("s1", 0))
	first, err := New(cfg, e.nc, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	allReady(t, first, "s1")
	first.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	drv.Close(ctx)

	// The machine rebooted and NATS is unreachable: serve what was desired.
	e.srv.Shutdown()
	second := start(t, Config{Node: cfg.Node, GPUs: cfg.GPUs, StateDir: cfg.StateDir, Lease: cfg.Lease, Heartbeat: cfg.Heartbeat, Driver: drv}, e.nc)
	allReady(t, second, "s1")
	if g := second.Status().Generation; g != 1 {
		t.Fatalf("generation %d from the state file, want 1", g)
	}
}

func TestAgentsSharingOneDriverLeaveEachOtherAlone(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	drv := newCountingDriver(t)
	e.put(t, "node-a", 1, classifier("a-1", 0))
	e.put(t, "node-b", 1, classifier("b-1", 0))
	a := start(t, testConfig(t, "node-a", drv), e.nc)
	bcfg := testConfig(t, "node-b", drv)
	b, err := New(bcfg, e.nc, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	allReady(t, a, "a-1")
	allReady(t, b, "b-1")
	b.Stop()

	// A restarted agent of one node, and a brand-new one, see the other
	// node's replica in the shared driver and leave it be.
	b2 := start(t, bcfg, e.nc)
	c := start(t, testConfig(t, "node-c", drv), e.nc)
	allReady(t, b2, "b-1")
	// node-c decides what to adopt in Start, from its (empty) state file;
	// two heartbeats later it has also reconciled its (empty) desired set.
	wait.Eventually(t, 10*time.Second, func() bool { return c.Counters().HeartbeatsSent >= 2 }, "node-c sent no second heartbeat")
	if rs := replicas(c); len(rs) != 0 {
		t.Fatalf("node-c took over %v", rs)
	}
	for _, x := range []*Agent{a, b2, c} {
		if n := x.Counters().ReplicaStops; n != 0 {
			t.Fatalf("an agent stopped %d replicas", n)
		}
	}
	if got := drv.starts.Load(); got != 2 {
		t.Fatalf("driver starts = %d, want 2", got)
	}
	allReady(t, a, "a-1")
}

func TestWaitsForTheDesiredBucketAndReportsLoading(t *testing.T) {
	t.Parallel()
	srv := natstest.NewRestartable(t)
	nc, err := nats.Connect(srv.URL(), append(natstest.ControlPlane(t), nats.MaxReconnects(-1))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	drv := NewSimDriver(SimDriverConfig{LoadDelay: 700 * time.Millisecond, Log: testLog(t)})
	t.Cleanup(func() { drv.Close(context.Background()) })
	a := start(t, testConfig(t, "node-early", drv), nc)

	// The control plane has not created the buckets yet: the agent waits,
	// heartbeating, and does not fail.
	wait.Eventually(t, 10*time.Second, func() bool { return a.Counters().HeartbeatsSent >= 3 },
		"no heartbeats while the bucket is missing: %v", wait.Show(func() any { return a.Counters() }))
	if c := a.Counters(); c.DesiredApplied != 0 {
		t.Fatalf("before the bucket exists: %+v", c)
	}
	e := &env{srv: srv, nc: nc}
	e.js, _ = jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := bus.Ensure(ctx, e.js); err != nil {
		t.Fatal(err)
	}
	if e.kv, err = e.js.KeyValue(ctx, busapi.BucketDesired); err != nil {
		t.Fatal(err)
	}
	e.put(t, "node-early", 1, classifier("late", 0))
	wait.Eventually(t, 10*time.Second, func() bool {
		r := replicas(a)["late"]
		return r.State == busapi.StateStarting && r.Addr != ""
	}, "late: %v, want starting while its model loads", wait.Show(func() any { return replicas(a)["late"] }))
	allReady(t, a, "late")
}
