package fleet_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"

	"modelplane/artifact"
	"modelplane/db"
	"modelplane/endpoint"
	"modelplane/gguf"
	"modelplane/llm"
	"modelplane/registry"
)

// ggufVersion uploads the demo GGUF as version name of model gguf-chat
// (builtin-llm) with the given resources, and writes the outcome a
// validator would: the need computed from the file, and validated.
func (f *fixture) ggufVersion(t *testing.T, name string, res registry.Resources, needMB int32) {
	t.Helper()
	ctx := t.Context()
	store, err := artifact.NewStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	reg := registry.New(f.pool, store, artifact.Limits{}).WithValidation(func() {})
	if _, err := reg.Model(ctx, f.eng, "gguf-chat"); err != nil {
		if _, err := reg.CreateModel(ctx, f.eng, registry.ModelSpec{Team: "risk", Name: "gguf-chat", Task: registry.TaskLLM}); err != nil {
			t.Fatal(err)
		}
	}
	var demo bytes.Buffer
	if err := llm.WriteDemo(&demo, gguf.F16); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(demo.Bytes())
	man := artifact.Manifest{"model.gguf": hex.EncodeToString(sum[:])}.Canonical()
	v, err := reg.RegisterVersion(ctx, f.eng, "gguf-chat", registry.VersionSpec{Name: name, Runtime: registry.BuiltinLLM, Resources: res},
		man, func(u *artifact.Upload) error {
			return u.Add(context.Background(), "model.gguf", bytes.NewReader(demo.Bytes()))
		})
	if err != nil {
		t.Fatal(err)
	}
	q := db.New(f.pool)
	if err := q.ModelVersionSetMemoryNeed(ctx, db.ModelVersionSetMemoryNeedParams{ID: v.ID, MemoryNeedMB: needMB}); err != nil {
		t.Fatal(err)
	}
	if err := q.ValidationFinish(ctx, db.ValidationFinishParams{VersionID: v.ID, State: registry.StatusValidated,
		Inputs: []byte("[]"), Outputs: []byte("[]")}); err != nil {
		t.Fatal(err)
	}
	if err := q.ModelVersionSetStatus(ctx, db.ModelVersionSetStatusParams{ID: v.ID, Status: registry.StatusValidated}); err != nil {
		t.Fatal(err)
	}
}

// TestGGUFReplicaSizedByMemoryNeed: a GGUF version's CPU replicas get the
// larger of its declared memory and the need computed from its file (the
// need alone when it declares none), and the node's memory is accounted
// by that: a 1000 MiB node holds three replicas of a 300 MiB need.
// Validation makes a version declaring less than its need invalid;
// placement does not rely on it ("below").
func TestGGUFReplicaSizedByMemoryNeed(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.ggufVersion(t, "undeclared", registry.Resources{}, 300)
	f.ggufVersion(t, "below", registry.Resources{MemoryMB: 100}, 300)
	f.ggufVersion(t, "above", registry.Resources{MemoryMB: 400}, 300)
	for _, v := range []string{"undeclared", "below", "above"} {
		if _, err := f.eps.Create(t.Context(), f.eng, endpoint.Spec{Name: v + "-ep", Model: "gguf-chat", Version: v,
			Settings: endpoint.Settings{MinReplicas: 1, MaxReplicas: 4, Tier: "standard", RetentionDays: 30}}); err != nil {
			t.Fatal(err)
		}
	}
	f.cpuHeartbeat(t, "cpu-big", 8, 4096)
	if p := f.reconcile(t); p.Placed != 3 || p.Unplaced != 0 {
		t.Fatalf("pass = %+v, want 3 placed", p)
	}
	want := map[string]int{"undeclared-ep": 300, "below-ep": 300, "above-ep": 400}
	for _, r := range f.desired(t, "cpu-big").Replicas {
		if r.MemoryMB != want[r.Endpoint] {
			t.Errorf("%s replica memory = %d MiB, want %d", r.Endpoint, r.MemoryMB, want[r.Endpoint])
		}
	}

	// Scale the undeclared one on a node of its own size: three fit.
	f2 := newFixture(t)
	f2.ggufVersion(t, "undeclared", registry.Resources{}, 300)
	if _, err := f2.eps.Create(t.Context(), f2.eng, endpoint.Spec{Name: "chat-ep", Model: "gguf-chat", Version: "undeclared",
		Settings: endpoint.Settings{MinReplicas: 4, MaxReplicas: 4, Tier: "standard", RetentionDays: 30}}); err != nil {
		t.Fatal(err)
	}
	f2.cpuHeartbeat(t, "cpu-a", 8, 1000)
	if p := f2.reconcile(t); p.Placed != 3 || p.Unplaced != 1 {
		t.Fatalf("pass = %+v, want 3 placed and 1 unplaced", p)
	}
	if e := f2.get(t, "chat-ep"); !strings.Contains(e.PlacementError, "300 MiB of free memory") {
		t.Errorf("placement error = %q, want the need's 300 MiB", e.PlacementError)
	}
}
