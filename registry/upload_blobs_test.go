package registry_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"modelplane/artifact"
	"modelplane/registry"
)

// stored reports whether the store holds a blob with digest d.
func (f *fixture) stored(t *testing.T, d string) bool {
	t.Helper()
	rc, err := f.store.Open(d)
	if errors.Is(err, artifact.ErrNotFound) {
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	rc.Close()
	return true
}

// TestFailedUploadRemovesBlobs checks a version upload that fails leaves
// none of the blobs it wrote, whatever made it fail, while a blob that a
// version of any team references stays.
func TestFailedUploadRemovesBlobs(t *testing.T) {
	t.Parallel()
	cfg := []byte(configJSON)
	tests := []struct {
		name     string
		manifest []byte
		files    upload
		gone     [][]byte // contents whose blobs must not be stored afterwards
	}{
		{name: "digest mismatch", manifest: upload{{"model.safetensors", []byte("other")}}.manifest(),
			files: upload{{"model.safetensors", safetensors}}, gone: [][]byte{safetensors}},
		{name: "refused file after good ones", files: upload{{"config.json", cfg}, {"model.safetensors", safetensors}, {"extra.pkl", pickle}},
			gone: [][]byte{safetensors, cfg, pickle}},
		{name: "missing file", manifest: upload{{"model.safetensors", safetensors}, {"config.json", cfg}}.manifest(),
			files: upload{{"model.safetensors", safetensors}}, gone: [][]byte{safetensors}},
		{name: "over the total limit", files: upload{{"model.safetensors", safetensors}, {"config.json", cfg},
			{"vocab.txt", []byte(strings.Repeat("a\n", 20))}}, gone: [][]byte{safetensors, cfg}},
		{name: "no model file", files: upload{{"config.json", cfg}}, gone: [][]byte{cfg}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			f.model(t, "llama")
			man := tt.manifest
			if man == nil {
				man = tt.files.manifest()
			}
			if _, err := f.svc.RegisterVersion(t.Context(), f.riskEng, "llama", registry.VersionSpec{Name: "v1", Runtime: "vllm"}, man, tt.files.files()); err == nil {
				t.Fatal("RegisterVersion succeeded, want it to fail")
			}
			for _, b := range tt.gone {
				if f.stored(t, digest(b)) {
					t.Errorf("blob %.12s… (%d bytes) of the failed upload is still stored", digest(b), len(b))
				}
			}
		})
	}
}

// TestFailedUploadKeepsSharedBlobs checks the blobs a failed upload shares
// with a registered version, of its team or another, or with an upload still
// in progress, stay.
func TestFailedUploadKeepsSharedBlobs(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := t.Context()
	f.model(t, "llama")
	if _, err := f.svc.CreateModel(ctx, f.searchEng, registry.ModelSpec{Team: "search", Name: "ranker", Task: registry.TaskRegression}); err != nil {
		t.Fatal(err)
	}
	// search registers the safetensors file; risk fails an upload holding it.
	up := upload{{"model.safetensors", safetensors}}
	if _, err := f.svc.RegisterVersion(ctx, f.searchEng, "ranker", registry.VersionSpec{Name: "v1", Runtime: "vllm"}, up.manifest(), up.files()); err != nil {
		t.Fatalf("RegisterVersion(search): %v", err)
	}
	cfg := []byte(configJSON)
	missing := upload{{"model.safetensors", safetensors}, {"config.json", cfg}, {"tokenizer.json", []byte(`{"a":1}`)}}
	_, err := f.svc.RegisterVersion(ctx, f.riskEng, "llama", registry.VersionSpec{Name: "v1", Runtime: "vllm"},
		missing.manifest(), upload{{"model.safetensors", safetensors}, {"config.json", cfg}}.files())
	if !errors.Is(err, artifact.ErrRejected) {
		t.Fatalf("RegisterVersion with a missing file = %v, want a rejection", err)
	}
	if !f.stored(t, digest(safetensors)) {
		t.Errorf("the blob search's version references was removed with risk's failed upload")
	}
	if f.stored(t, digest(cfg)) {
		t.Errorf("the config blob only the failed upload wrote is still stored")
	}

	// An upload in progress holds config.json when another one with it fails.
	files := func(u *artifact.Upload) error {
		if err := u.Add(ctx, "config.json", strings.NewReader(configJSON)); err != nil {
			return err
		}
		_, err := f.svc.RegisterVersion(ctx, f.riskEng, "llama", registry.VersionSpec{Name: "v3", Runtime: "vllm"},
			upload{{"config.json", cfg}}.manifest(), upload{{"config.json", cfg}}.files())
		if err == nil {
			t.Errorf("RegisterVersion of configs alone succeeded, want it to fail")
		}
		if !f.stored(t, digest(cfg)) {
			t.Errorf("a failed upload removed the config blob another upload in progress holds")
		}
		return u.Add(ctx, "model.safetensors", bytes.NewReader(safetensors))
	}
	both := upload{{"config.json", cfg}, {"model.safetensors", safetensors}}
	if _, err := f.svc.RegisterVersion(ctx, f.riskEng, "llama", registry.VersionSpec{Name: "v2", Runtime: "vllm"}, both.manifest(), files); err != nil {
		t.Fatalf("RegisterVersion(v2): %v", err)
	}
	for _, b := range [][]byte{cfg, safetensors} {
		if err := f.store.Verify(digest(b)); err != nil {
			t.Errorf("blob of the registered version: %v", err)
		}
	}
}
