package registry_test

import (
	"bytes"
	"strings"
	"testing"

	"modelplane/artifact"
	"modelplane/db"
	"modelplane/gguf"
	"modelplane/llm"
	"modelplane/registry"
)

// TestRegisterGGUFMemory: a builtin-llm GGUF upload that the control
// plane validates may leave memory_mb unset, and it stays 0 (validation
// computes the need from the file); a declared memory_mb is kept as
// declared; where nothing will compute the need (no validation, or the
// file is elsewhere) the CPU default is stored as for any CPU version.
func TestRegisterGGUFMemory(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := t.Context()
	f.model(t, "chat")
	var demo bytes.Buffer
	if err := llm.WriteDemo(&demo, gguf.F16); err != nil {
		t.Fatal(err)
	}
	up := upload{{"model.gguf", demo.Bytes()}}
	validating := registry.New(f.pool, f.store, artifact.Limits{}).WithValidation(func() {})
	plain := registry.New(f.pool, f.store, artifact.Limits{})
	for _, tt := range []struct {
		name   string
		svc    *registry.Service
		res    registry.Resources
		uri    string
		memory int32
	}{
		{"undeclared-validated", validating, registry.Resources{}, "", 0},
		{"declared-validated", validating, registry.Resources{MemoryMB: 300}, "", 300},
		{"undeclared-not-validated", plain, registry.Resources{}, "", registry.DefaultMemoryMB},
		{"undeclared-external", validating, registry.Resources{}, "s3://models/chat/x.gguf", registry.DefaultMemoryMB},
	} {
		spec := registry.VersionSpec{Name: tt.name, Runtime: registry.BuiltinLLM, Resources: tt.res}
		files := up.files()
		if tt.uri != "" {
			spec.ArtifactURI, spec.Format, files = tt.uri, "gguf", nil
		}
		v, err := tt.svc.RegisterVersion(ctx, f.riskEng, "chat", spec, up.manifest(), files)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if v.Resources.MemoryMB != tt.memory || v.Resources.CPUCores != registry.DefaultCPUCores || v.MemoryNeedMB != 0 {
			t.Errorf("%s: resources %+v, need %d; want memory_mb %d, %d core, no need yet", tt.name, v.Resources, v.MemoryNeedMB,
				tt.memory, registry.DefaultCPUCores)
		}
	}
}

// TestMemoryNeedWrittenOnce: a version's memory need may be written once,
// and then never changed; every other column stays immutable.
func TestMemoryNeedWrittenOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := t.Context()
	f.model(t, "chat")
	v := f.external(t, "chat", "v1", "")
	q := db.New(f.pool)
	if err := q.ModelVersionSetMemoryNeed(ctx, db.ModelVersionSetMemoryNeedParams{ID: v.ID, MemoryNeedMB: 40}); err != nil {
		t.Fatal(err)
	}
	// The query leaves a written need alone; a direct update is refused.
	if err := q.ModelVersionSetMemoryNeed(ctx, db.ModelVersionSetMemoryNeedParams{ID: v.ID, MemoryNeedMB: 41}); err != nil {
		t.Fatal(err)
	}
	for _, stmt := range []string{
		"UPDATE model_versions SET memory_need_mb = 41 WHERE id = $1",
		"UPDATE model_versions SET memory_mb = 41 WHERE id = $1",
	} {
		if _, err := f.pool.Exec(ctx, stmt, v.ID); err == nil || !strings.Contains(err.Error(), "immutable") {
			t.Errorf("%s: error %v, want the immutability trigger's", stmt, err)
		}
	}
	got, err := f.svc.Version(ctx, f.riskEng, "chat", "v1")
	if err != nil {
		t.Fatal(err)
	}
	if got.MemoryNeedMB != 40 {
		t.Errorf("need = %d, want 40 as first written", got.MemoryNeedMB)
	}
}

// TestCPUNeeding: a CPU replica is placed with the larger of the declared
// memory and the need computed from the file, the need alone when none is
// declared, the default when neither is known; a GPU version's host
// memory is not placed by.
func TestCPUNeeding(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name        string
		res         registry.Resources
		need        int32
		cores, want int32
	}{
		{"undeclared takes the need", registry.Resources{}, 33, 1, 33},
		{"declared above the need is kept", registry.Resources{CPUCores: 2, MemoryMB: 256}, 33, 2, 256},
		{"declared below the need takes the need", registry.Resources{MemoryMB: 16}, 33, 1, 33},
		{"no need: the declared", registry.Resources{MemoryMB: 512}, 0, 1, 512},
		{"neither: the default", registry.Resources{}, 0, 1, registry.DefaultMemoryMB},
		{"a GPU version is not sized by it", registry.Resources{GPUCount: 1, MemoryMB: 0}, 33, 0, 0},
	} {
		if cores, mem := tt.res.CPUNeeding(tt.need); cores != tt.cores || mem != tt.want {
			t.Errorf("%s: CPUNeeding(%d) of %+v = %d cores, %d MiB; want %d, %d", tt.name, tt.need, tt.res, cores, mem, tt.cores, tt.want)
		}
	}
}
