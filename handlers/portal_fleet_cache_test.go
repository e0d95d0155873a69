package handlers

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"modelplane/busapi"
	"modelplane/endpoint"
	"modelplane/fleet"
	"modelplane/registry"
	"modelplane/replica"
)

// TestFleetShowsNodeCachesAndReplicaColdStarts: the node cache and each
// replica's load and cold start split, as the heartbeat reports them, are
// on the fleet page, the node's page and in GET /nodes and /nodes/{node}.
func TestFleetShowsNodeCachesAndReplicaColdStarts(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	ctx := context.Background()
	cache := &busapi.CacheStatus{BytesUsed: 300 << 20, BytesLimit: 10 << 30, Versions: 3, Hits: 7, Misses: 2, Evictions: 1}
	beat := func(reps ...busapi.ReplicaStatus) {
		t.Helper()
		if _, err := e.srv.Fleet.Observe(ctx, busapi.NodeStatus{Node: "cpu-01", BootID: "b1", LeaseSeconds: 15, CPUCores: 16, MemoryMB: 65536,
			Cache: cache, Replicas: reps}); err != nil {
			t.Fatal(err)
		}
	}
	beat()
	files := map[string][]byte{"model.safetensors": safetensorsFile("cache-portal")}
	if _, err := e.srv.Registry.RegisterVersion(ctx, system, "risk-model", registry.VersionSpec{Name: "c1", Runtime: "onnxruntime",
		Resources: registry.Resources{CPUCores: 1, MemoryMB: 1024}}, manifestOf(files), filesOf(files)); err != nil {
		t.Fatal(err)
	}
	if _, err := e.srv.Endpoints.Create(ctx, system, endpoint.Spec{Name: "risk-cpu", Model: "risk-model", Version: "c1",
		Settings: endpoint.Settings{MinReplicas: 1, MaxReplicas: 1, Tier: "standard", RetentionDays: 30}}); err != nil {
		t.Fatal(err)
	}
	e.reconcile(t)
	reps := e.replicas(t, "risk-cpu")
	if len(reps) != 1 {
		t.Fatalf("replicas = %+v, want one", reps)
	}
	name := reps[0].Name
	beat(busapi.ReplicaStatus{ID: name, State: busapi.StateReady, QueueDepth: 2, InFlight: 5, BatchSize: 3.5, Requests: 1234,
		DownloadMS: 1800, VerifyMS: 250, LoadMS: 400, WarmupMS: 60})

	admin := portalSignIn(t, e, "admin@example.com")
	r := admin.get("/fleet")
	if r.StatusCode != http.StatusOK {
		t.Fatalf("GET /fleet = %d\n%s", r.StatusCode, r.Body)
	}
	doc := r.doc(t)
	portalCheckMarkup(t, "/fleet", doc)
	if got := nodeRowText(doc.Find(`#nodes tr[data-node="cpu-01"]`))["cache"]; got != "300.0 MB / 10.0 GB (3%) · 3 versions · 7 hits / 2 misses / 1 evicted" {
		t.Errorf("fleet row cache = %q", got)
	}

	page := admin.get("/fleet/cpu-01")
	if page.StatusCode != http.StatusOK {
		t.Fatalf("GET /fleet/cpu-01 = %d\n%s", page.StatusCode, page.Body)
	}
	pd := page.doc(t)
	portalCheckMarkup(t, "/fleet/cpu-01", pd)
	for sel, want := range map[string]string{"#node-cache .used": "300.0 MB / 10.0 GB (3%)", "#node-cache .versions": "3",
		"#node-cache .hits": "7", "#node-cache .misses": "2", "#node-cache .evictions": "1"} {
		if got := portalText(pd.Find(sel)); got != want {
			t.Errorf("node page %s = %q, want %q", sel, got, want)
		}
	}
	row := nodeRowText(pd.Find(`#node-replicas tr[data-replica="` + name + `"]`))
	for k, v := range map[string]string{"queue": "2", "inflight": "5", "batch": "3.5", "requests": "1234", "tokens": "–",
		"coldstart": "2510 ms", "download": "1800 ms", "verify": "250 ms", "load": "400 ms", "warmup": "60 ms"} {
		if row[k] != v {
			t.Errorf("node page replica %s: %s = %q, want %q", name, k, row[k], v)
		}
	}

	var list struct{ Items []fleet.Node }
	e.getJSON(t, e.Keys["platform-admin"], "/nodes", &list)
	var listed *fleet.Node
	for i := range list.Items {
		if list.Items[i].Name == "cpu-01" {
			listed = &list.Items[i]
		}
	}
	if listed == nil || listed.Cache == nil || *listed.Cache != *cache {
		t.Errorf("GET /nodes cpu-01 = %+v, want its cache %+v", listed, cache)
	}
	var one fleet.Node
	e.getJSON(t, e.Keys["platform-admin"], "/nodes/cpu-01", &one)
	wantCold := replica.ColdStart{DownloadMS: 1800, VerifyMS: 250, LoadMS: 400, WarmupMS: 60}
	if len(one.Replicas) != 1 || one.Replicas[0].Metrics.ColdStart != wantCold || one.Replicas[0].Metrics.InFlight != 5 ||
		one.Replicas[0].Metrics.BatchSize != 3.5 {
		t.Errorf("GET /nodes/cpu-01 replicas = %+v, want in-flight 5, batch 3.5 and cold start %+v", one.Replicas, wantCold)
	}
	var ep endpoint.Endpoint
	e.getJSON(t, e.Keys["platform-admin"], "/endpoints/risk-cpu", &ep)
	if len(ep.Replicas) != 1 || ep.Replicas[0].Metrics.InFlight != 5 || ep.Replicas[0].Metrics.ColdStart != wantCold {
		t.Errorf("GET /endpoints/risk-cpu replicas = %+v, want the heartbeat's metrics", ep.Replicas)
	}
	if strings.Contains(string(page.Body), "no limit") {
		t.Error("a cache with a limit shown as unlimited")
	}
}
