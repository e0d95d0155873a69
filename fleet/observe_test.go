package fleet_test

import (
	"errors"
	"math"
	"reflect"
	"testing"
	"time"

	"modelplane/busapi"
	"modelplane/fleet"
	"modelplane/replica"
)

// A heartbeat's per-replica load and cold start and the node's cache are
// kept, shown on the node and with the endpoint's replicas, and replaced
// by the next heartbeat; load alone never counts as a change that wakes
// the reconciler.
func TestHeartbeatMetricsAndCacheAreKeptAndShown(t *testing.T) {
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
	r.QueueDepth, r.InFlight, r.BatchSize, r.Requests, r.KVUsedPct = 3, 7, 2.5, 41, 12
	tokens, prompt := int64(9500), int64(20000)
	r.TokensPerSecond, r.TTFTMS, r.Tokens, r.PromptTokens = 950, 120, &tokens, &prompt
	r.BatchQueueMS, r.GPUUtil = 4.5, 0.62
	r.DownloadMS, r.VerifyMS, r.LoadMS, r.WarmupMS = 1500, 200, 300, 40
	cache := &busapi.CacheStatus{BytesUsed: 3 << 20, BytesLimit: 1 << 30, Versions: 2, Hits: 5, Misses: 2, Evictions: 1}
	observe := func(r busapi.ReplicaStatus) bool {
		t.Helper()
		changed, err := f.fleet.Observe(t.Context(), busapi.NodeStatus{Node: "node-a", BootID: "b1", LeaseSeconds: 15, GPUs: inv,
			Replicas: []busapi.ReplicaStatus{r}, Cache: cache})
		if err != nil {
			t.Fatal(err)
		}
		return changed
	}
	if !observe(r) {
		t.Error("first ready heartbeat reported no change")
	}
	want := replica.Metrics{QueueDepth: 3, InFlight: 7, BatchSize: 2.5, Requests: 41, KVUsedPct: 12, TokensPerSecond: 950, TTFTMS: 120,
		Tokens: 9500, PromptTokens: 20000, BatchQueueMS: 4.5, GPUUtil: 0.62, ObservedAtMS: f.clock.Now().UnixMilli(),
		ColdStart: replica.ColdStart{DownloadMS: 1500, VerifyMS: 200, LoadMS: 300, WarmupMS: 40}}
	n, err := f.fleet.Node(t.Context(), f.root, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	if n.Cache == nil || *n.Cache != *cache {
		t.Errorf("node cache = %+v, want %+v", n.Cache, cache)
	}
	if len(n.Replicas) != 1 || n.Replicas[0].Name != r.ID || n.Replicas[0].Endpoint != "fraud-ep" || !reflect.DeepEqual(n.Replicas[0].Metrics, want) {
		t.Errorf("node replicas = %+v, want %s of fraud-ep with %+v", n.Replicas, r.ID, want)
	}
	ns, err := f.fleet.Nodes(t.Context(), f.root)
	if err != nil {
		t.Fatal(err)
	}
	if len(ns) != 1 || ns[0].Cache == nil || ns[0].Cache.Hits != 5 {
		t.Errorf("nodes = %+v, want node-a with its cache", ns)
	}
	if e := f.get(t, "fraud-ep"); len(e.Replicas) != 1 || !reflect.DeepEqual(e.Replicas[0].Metrics, want) {
		t.Errorf("endpoint replicas = %+v, want the metrics %+v", e.Replicas, want)
	}

	// The next heartbeat's load replaces this one's and wakes nothing;
	// requests/s is the counter's growth between the two heartbeats.
	f.clock.Advance(2 * time.Second)
	r.QueueDepth, r.InFlight, r.Requests = 0, 1, 141
	if observe(r) {
		t.Error("a change of load alone reported a change")
	}
	if m := f.get(t, "fraud-ep").Replicas[0].Metrics; m.InFlight != 1 || m.QueueDepth != 0 || m.RPS != 50 {
		t.Errorf("metrics after the next heartbeat = %+v, want in-flight 1, queue 0, rps 50 (100 requests in 2 s)", m)
	}
	// A report of the same time keeps the rate; a runtime that restarted
	// (its counter went back) reads 0 requests/s, not a negative rate.
	r.InFlight = 2
	observe(r)
	if m := f.get(t, "fraud-ep").Replicas[0].Metrics; m.InFlight != 2 || m.RPS != 50 {
		t.Errorf("metrics of a second report at the same time = %+v, want in-flight 2, rps still 50", m)
	}
	f.clock.Advance(2 * time.Second)
	r.Requests = 3
	observe(r)
	if m := f.get(t, "fraud-ep").Replicas[0].Metrics; m.RPS != 0 || m.Requests != 3 {
		t.Errorf("metrics after a counter reset = %+v, want rps 0, requests 3", m)
	}
}

func TestHeartbeatMetricsNoRuntimeProducesAreRefused(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	inv := gpus(0, 1, "A100-80GB", nil)
	rep := func(mod func(*busapi.ReplicaStatus)) busapi.NodeStatus {
		r := busapi.ReplicaStatus{ID: "x", State: busapi.StateReady}
		mod(&r)
		return busapi.NodeStatus{Node: "node-a", LeaseSeconds: 15, GPUs: inv, Replicas: []busapi.ReplicaStatus{r}}
	}
	for name, st := range map[string]busapi.NodeStatus{
		"negative in-flight": rep(func(r *busapi.ReplicaStatus) { r.InFlight = -1 }),
		"negative queue":     rep(func(r *busapi.ReplicaStatus) { r.QueueDepth = -2 }),
		"NaN batch":          rep(func(r *busapi.ReplicaStatus) { r.BatchSize = math.NaN() }),
		"KV above 100":       rep(func(r *busapi.ReplicaStatus) { r.KVUsedPct = 101 }),
		"negative tokens/s":  rep(func(r *busapi.ReplicaStatus) { r.TokensPerSecond = -5 }),
		"negative prompt tokens": rep(func(r *busapi.ReplicaStatus) {
			n := int64(-1)
			r.PromptTokens = &n
		}),
		"GPU use above 1":     rep(func(r *busapi.ReplicaStatus) { r.GPUUtil = 1.5 }),
		"NaN batch queue":     rep(func(r *busapi.ReplicaStatus) { r.BatchQueueMS = math.NaN() }),
		"negative download":   rep(func(r *busapi.ReplicaStatus) { r.DownloadMS = -1 }),
		"warm-up of a year":   rep(func(r *busapi.ReplicaStatus) { r.WarmupMS = 365 * 24 * 3600 * 1000 }),
		"negative cache size": {Node: "node-a", LeaseSeconds: 15, GPUs: inv, Cache: &busapi.CacheStatus{BytesUsed: -1}},
	} {
		if _, err := f.fleet.Observe(t.Context(), st); !errors.Is(err, fleet.ErrBadStatus) {
			t.Errorf("%s: err = %v, want ErrBadStatus", name, err)
		}
	}
}

// TestFirstReadyReplicaValidatesAVersionTheControlPlaneCannotRun: a
// version the control plane does not validate itself (a GPU version of a
// runtime it cannot run) stays registered until its first replica reports
// ready, which the runtime's own warm-up gates; then it is validated.
func TestFirstReadyReplicaValidatesAVersionTheControlPlaneCannotRun(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	inv := gpus(0, 1, "A100-80GB", seven1g())
	f.heartbeat(t, "node-a", inv)
	f.endpoint(t, "fraud-ep", "fraud", "v1", "mig-1g.10gb", "critical", 1)
	f.reconcile(t)
	status := func() string {
		t.Helper()
		var s string
		if err := f.pool.QueryRow(t.Context(), `SELECT v.status FROM model_versions v JOIN models m ON m.id = v.model_id
			WHERE m.name = 'fraud' AND v.name = 'v1'`).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	rs := ready(f.desired(t, "node-a"))
	starting := rs[0]
	starting.State = busapi.StateStarting
	for _, r := range []busapi.ReplicaStatus{starting, rs[0]} {
		if got := status(); got != "registered" {
			t.Fatalf("before a ready replica (%s): status %s, want registered", r.State, got)
		}
		if _, err := f.fleet.Observe(t.Context(), busapi.NodeStatus{Node: "node-a", BootID: "b1", LeaseSeconds: 15, GPUs: inv,
			Replicas: []busapi.ReplicaStatus{r}}); err != nil {
			t.Fatal(err)
		}
	}
	if got := status(); got != "validated" {
		t.Errorf("after its replica reported ready: status %s, want validated", got)
	}
}
