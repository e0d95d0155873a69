package fleet_test

import (
	"encoding/json"
	"slices"
	"testing"

	"modelplane/artifact"
	"modelplane/endpoint"
	"modelplane/registry"
	"modelplane/serveapi"
)

// TestBatchingSettingsReachTheReplicaSpec: a built-in runtime replica's
// settings carry its endpoint's batching (the defaults when none were
// set), and a change of them changes the spec of the same replica, which
// is what makes its agent restart it with the new settings.
func TestBatchingSettingsReachTheReplicaSpec(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := t.Context()
	store, err := artifact.NewStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	reg := registry.New(f.pool, store, artifact.Limits{})
	if _, err := reg.CreateModel(ctx, f.eng, registry.ModelSpec{Team: "risk", Name: "scorer", Task: registry.TaskClassification,
		FeatureNames: []string{"amount"}}); err != nil {
		t.Fatal(err)
	}
	man := []byte(`{"model.onnx":"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}`)
	if _, err := reg.RegisterVersion(ctx, f.eng, "scorer", registry.VersionSpec{Name: "s1", Runtime: "onnxruntime", Format: "onnx",
		ArtifactURI: "s3://models/scorer/s1", Resources: registry.Resources{GPUCount: 1, GPUMemoryMB: 4096}}, man, nil); err != nil {
		t.Fatal(err)
	}
	f.heartbeat(t, "node-a", gpus(0, 1, "A100-80GB", seven1g()))
	f.endpoint(t, "scorer-ep", "scorer", "s1", "mig-1g.10gb", "standard", 1)
	if p := f.reconcile(t); p.Placed != 1 {
		t.Fatalf("pass = %+v, want 1 placed", p)
	}
	id, got := specBatching(t, f)
	want := serveapi.Batching{MaxBatchSize: 32, MaxQueueDelayUS: 500, QueueTimeoutMS: 1000}
	if !equalBatching(got, want) {
		t.Fatalf("batching = %+v, want the defaults %+v", got, want)
	}

	set := endpoint.Settings{InstanceProfile: "mig-1g.10gb", MinReplicas: 1, MaxReplicas: 1, Tier: "standard", RetentionDays: 30,
		Batching: endpoint.Batching{MaxBatchSize: 64, MaxQueueDelayUS: 0, PreferredBatchSizes: []int32{8, 16}, QueueTimeoutMS: 250}}
	if _, err := f.eps.Update(ctx, f.eng, "scorer-ep", set); err != nil {
		t.Fatal(err)
	}
	f.reconcile(t)
	id2, got := specBatching(t, f)
	want = serveapi.Batching{MaxBatchSize: 64, MaxQueueDelayUS: 0, PreferredBatchSizes: []int{8, 16}, QueueTimeoutMS: 250}
	if id2 != id || !equalBatching(got, want) {
		t.Fatalf("after the update: replica %s with batching %+v; want replica %s with %+v", id2, got, id, want)
	}
}

func specBatching(t *testing.T, f *fixture) (string, serveapi.Batching) {
	t.Helper()
	d := f.desired(t, "node-a")
	if len(d.Replicas) != 1 {
		t.Fatalf("desired = %+v, want one replica", d)
	}
	var cfg serveapi.Config
	if err := json.Unmarshal(d.Replicas[0].Settings, &cfg); err != nil {
		t.Fatalf("settings %s: %v", d.Replicas[0].Settings, err)
	}
	return d.Replicas[0].ID, cfg.Batching
}

func equalBatching(a, b serveapi.Batching) bool {
	return a.MaxBatchSize == b.MaxBatchSize && a.MaxQueueDelayUS == b.MaxQueueDelayUS && a.QueueTimeoutMS == b.QueueTimeoutMS &&
		slices.Equal(a.PreferredBatchSizes, b.PreferredBatchSizes)
}
