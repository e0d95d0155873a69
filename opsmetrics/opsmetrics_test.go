package opsmetrics_test

import (
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/quartz"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"

	"modelplane/artifact"
	"modelplane/auth"
	"modelplane/busapi"
	"modelplane/db"
	"modelplane/endpoint"
	"modelplane/fleet"
	"modelplane/internal/pgtest"
	"modelplane/internal/promcheck"
	"modelplane/opsmetrics"
	"modelplane/registry"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestSeriesFromHeartbeats places a replica of a GPU endpoint, has its
// node report it ready with load figures, and reads the series a scrape
// gets: replicas by state, wanted, cost at the default H100 rate, the
// replica's load, the node's GPU and lease, and no series for what the
// runtime did not report.
func TestSeriesFromHeartbeats(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.New(t)
	clock := quartz.NewMock(t)
	clock.Set(time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC))
	store, err := artifact.NewStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	tm, err := db.New(pool).TeamCreate(ctx, db.TeamCreateParams{Name: "risk"})
	if err != nil {
		t.Fatal(err)
	}
	eng := &auth.Principal{Name: "eng@example.com", Via: "session", Teams: []auth.Membership{{TeamID: tm.ID, Team: "risk", Role: auth.RoleAdmin}}}
	reg := registry.New(pool, store, artifact.Limits{})
	if _, err := reg.CreateModel(ctx, eng, registry.ModelSpec{Team: "risk", Name: "fraud", Task: registry.TaskClassification}); err != nil {
		t.Fatal(err)
	}
	man := []byte(`{"model.onnx":"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}`)
	if _, err := reg.RegisterVersion(ctx, eng, "fraud", registry.VersionSpec{Name: "v1", Runtime: "triton", Format: "onnx",
		ArtifactURI: "s3://models/fraud/v1", Resources: registry.Resources{GPUCount: 1, GPUMemoryMB: 4096, GPUType: "H100-80GB"}}, man, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := endpoint.New(pool).Create(ctx, eng, endpoint.Spec{Name: "fraud-ep", Model: "fraud", Version: "v1",
		Settings: endpoint.Settings{InstanceProfile: "gpu-h100-80gb", MinReplicas: 1, MaxReplicas: 3, Tier: "standard", RetentionDays: 30}}); err != nil {
		t.Fatal(err)
	}
	fl := fleet.New(pool, fleet.Options{Clock: clock, Log: slog.New(slog.DiscardHandler)})
	inv := []busapi.GPU{{Index: 0, Type: "H100-80GB", MemoryMB: 81920, Slices: []busapi.Slice{{Index: 0, Profile: busapi.ProfileFull}}},
		{Index: 1, Type: "H100-80GB", MemoryMB: 81920, Slices: []busapi.Slice{{Index: 0, Profile: busapi.ProfileFull}}}}
	beat := func(reps ...busapi.ReplicaStatus) {
		t.Helper()
		gpus := append([]busapi.GPU(nil), inv...)
		gpus[0].UtilPct, gpus[0].MemoryUsedMB = 50, 4096
		if _, err := fl.Observe(ctx, busapi.NodeStatus{Node: "gpu-01", BootID: "b1", LeaseSeconds: 15, GPUs: gpus, Replicas: reps}); err != nil {
			t.Fatal(err)
		}
	}
	beat()
	if _, err := fl.Reconcile(ctx, clock.Now().Add(-time.Minute)); err != nil {
		t.Fatal(err)
	}
	var replica string
	if err := pool.QueryRow(ctx, "SELECT name FROM replicas").Scan(&replica); err != nil {
		t.Fatal(err)
	}
	beat(busapi.ReplicaStatus{ID: replica, State: busapi.StateReady, Addr: "10.0.0.1:9000", QueueDepth: 3, InFlight: 5,
		BatchSize: 4, GPUUtil: 0.5, Requests: 10, WarmupMS: 1500, LoadMS: 500,
		Absent: []string{busapi.MetricKVUsedPct, busapi.MetricTokensPerSecond, busapi.MetricTTFTMS, busapi.MetricBatchQueueMS}})
	clock.Advance(7 * time.Second)

	c := opsmetrics.New(pool, clock, slog.New(slog.DiscardHandler))
	r := prometheus.NewPedanticRegistry()
	r.MustRegister(c)
	lbl := `{endpoint="fraud-ep",node="gpu-01",replica="` + replica + `",team="risk",version="v1"}`
	want := `
# HELP ml_serving_replicas Replicas of a version by state (placed, starting, ready, failed).
# TYPE ml_serving_replicas gauge
ml_serving_replicas{endpoint="fraud-ep",state="ready",team="risk",version="v1"} 1
# HELP ml_serving_replicas_wanted Replicas an endpoint should have: the autoscaler's last count, else its minimum.
# TYPE ml_serving_replicas_wanted gauge
ml_serving_replicas_wanted{endpoint="fraud-ep",team="risk"} 1
# HELP ml_serving_cost_usd_per_hour What a version's allocations cost per hour at the rates in force now.
# TYPE ml_serving_cost_usd_per_hour gauge
ml_serving_cost_usd_per_hour{endpoint="fraud-ep",team="risk",version="v1"} COST
# HELP ml_serving_queue_depth Requests waiting to execute in a replica.
# TYPE ml_serving_queue_depth gauge
ml_serving_queue_depth` + lbl + ` 3
# HELP ml_serving_batch_size A replica's mean executed batch, or the sequences in an LLM engine's batch.
# TYPE ml_serving_batch_size gauge
ml_serving_batch_size` + lbl + ` 4
# HELP ml_serving_cold_start_seconds How long a replica took to become ready: download, verify, load and warm-up.
# TYPE ml_serving_cold_start_seconds gauge
ml_serving_cold_start_seconds` + lbl + ` 2
# HELP ml_serving_kv_cache_utilization_ratio Share of an LLM replica's KV cache in use, 0 to 1.
# TYPE ml_serving_kv_cache_utilization_ratio gauge
# HELP ml_serving_gpu_utilization_ratio A GPU's utilisation as its node reported it, 0 to 1.
# TYPE ml_serving_gpu_utilization_ratio gauge
ml_serving_gpu_utilization_ratio{gpu="0",node="gpu-01"} 0.5
ml_serving_gpu_utilization_ratio{gpu="1",node="gpu-01"} 0
# HELP ml_serving_gpu_memory_used_bytes A GPU's memory in use as its node reported it.
# TYPE ml_serving_gpu_memory_used_bytes gauge
ml_serving_gpu_memory_used_bytes{gpu="0",node="gpu-01"} 4.294967296e+09
ml_serving_gpu_memory_used_bytes{gpu="1",node="gpu-01"} 0
# HELP modelplane_node_up 1 while a node's lease holds, 0 once it is lost.
# TYPE modelplane_node_up gauge
modelplane_node_up{node="gpu-01"} 1
# HELP modelplane_node_heartbeat_age_seconds Time since a node's last heartbeat.
# TYPE modelplane_node_heartbeat_age_seconds gauge
modelplane_node_heartbeat_age_seconds{node="gpu-01"} 7
# HELP modelplane_node_slices_used A node's GPU units held by replicas.
# TYPE modelplane_node_slices_used gauge
modelplane_node_slices_used{node="gpu-01"} 1
# HELP modelplane_fleet_metrics_up 1 when the last read of the fleet's state for these metrics succeeded.
# TYPE modelplane_fleet_metrics_up gauge
modelplane_fleet_metrics_up 1
`
	var rate int64
	if err := pool.QueryRow(ctx, "SELECT uusd_per_hour FROM cost_rates WHERE gpu_type = 'H100-80GB' AND profile = 'full' ORDER BY effective_from DESC LIMIT 1").Scan(&rate); err != nil {
		t.Fatalf("the default H100 rate: %v", err)
	}
	want = strings.Replace(want, "COST", strconv.FormatFloat(float64(rate)/1e6, 'f', -1, 64), 1)
	if err := testutil.GatherAndCompare(r, strings.NewReader(want), "ml_serving_replicas", "ml_serving_replicas_wanted", "ml_serving_cost_usd_per_hour",
		"ml_serving_queue_depth", "ml_serving_batch_size", "ml_serving_cold_start_seconds", "ml_serving_kv_cache_utilization_ratio",
		"ml_serving_gpu_utilization_ratio", "ml_serving_gpu_memory_used_bytes", "modelplane_node_up", "modelplane_node_heartbeat_age_seconds",
		"modelplane_node_slices_used", "modelplane_fleet_metrics_up"); err != nil {
		t.Error(err)
	}
	text, err := testutil.CollectAndFormat(c, expfmt.TypeTextPlain)
	if err != nil {
		t.Fatal(err)
	}
	promcheck.Metrics(t, string(text))
}
