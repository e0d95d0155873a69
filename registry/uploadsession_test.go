package registry_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/coder/quartz"

	"modelplane/db"
	"modelplane/registry"
)

// TestUploadSessionResumesAndExpires sends a file as chunks into a session,
// stops half-way, and resumes: the session lists the chunks it holds, so
// only the rest are sent; completing registers the version with the
// manifest's digests, completing again answers the same version (one
// version, not two), and an expired session is gone with its chunks, on
// the registry's clock.
func TestUploadSessionResumesAndExpires(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	clock := quartz.NewMock(t)
	f.svc.WithClock(clock)
	ctx := t.Context()
	f.model(t, "chat")
	files := upload{{"model.safetensors", safetensors}, {"config.json", []byte(configJSON)}}
	// Chunks of 10 bytes: the safetensors file is several.
	split := func(b []byte) [][]byte {
		var out [][]byte
		for len(b) > 10 {
			out, b = append(out, b[:10]), b[10:]
		}
		return append(out, b)
	}
	chunks := map[string][]string{}
	var all [][]byte
	for _, fl := range files {
		for _, c := range split(fl.data) {
			chunks[fl.path] = append(chunks[fl.path], digest(c))
			all = append(all, c)
		}
	}
	u, err := f.svc.CreateUpload(ctx, f.riskEng, "chat", registry.VersionSpec{Name: "v1", Runtime: "vllm"}, files.manifest())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.svc.CreateUpload(ctx, f.riskViewer, "chat", registry.VersionSpec{Name: "v1", Runtime: "vllm"}, files.manifest()); err == nil {
		t.Error("a viewer started an upload")
	}
	half := len(all) / 2
	for _, c := range all[:half] {
		if _, err := f.svc.PutChunk(ctx, f.riskEng, u.ID, digest(c), bytes.NewReader(c)); err != nil {
			t.Fatal(err)
		}
	}
	// The upload is cut off; a new client asks what the session holds.
	got, err := f.svc.Upload(ctx, f.riskAdmin, u.ID)
	if err != nil {
		t.Fatal(err)
	}
	held := map[string]bool{}
	for _, c := range got.Chunks {
		held[c.SHA256] = true
	}
	sent := 0
	for _, c := range all {
		if held[digest(c)] {
			continue
		}
		sent++
		if _, err := f.svc.PutChunk(ctx, f.riskEng, u.ID, digest(c), bytes.NewReader(c)); err != nil {
			t.Fatal(err)
		}
	}
	if len(got.Chunks) == 0 || sent > len(all)-half {
		t.Errorf("resumed with %d chunks held, sent %d of %d; want the held ones not sent again", len(got.Chunks), sent, len(all))
	}
	if _, err := f.svc.PutChunk(ctx, f.riskEng, u.ID, digest([]byte("other")), bytes.NewReader([]byte("bytes"))); !hasField(err, "sha256") {
		t.Errorf("a chunk whose bytes are not its sha256: %v; want a sha256 field error", err)
	}
	if _, err := f.svc.Upload(ctx, f.searchEng, u.ID); !errors.Is(err, db.ErrNotFound) {
		t.Errorf("another team reads the session: %v; want not found", err)
	}
	before := f.versions(t)
	v, created, err := f.svc.CompleteUpload(ctx, f.riskEng, u.ID, chunks)
	if err != nil || !created {
		t.Fatalf("complete = %v, %v", created, err)
	}
	if v.Manifest["model.safetensors"] != digest(safetensors) || v.Manifest["config.json"] != digest([]byte(configJSON)) || v.Format != "safetensors" {
		t.Errorf("version %+v; want the manifest's digests", v)
	}
	again, created, err := f.svc.CompleteUpload(ctx, f.riskEng, u.ID, chunks)
	if err != nil || created || again.ID != v.ID {
		t.Errorf("complete again = %+v, %v, %v; want the same version", again, created, err)
	}
	if n := f.versions(t); n != before+1 {
		t.Errorf("%d versions registered; want one", n-before)
	}

	// A second session, left unfinished, expires with its chunks.
	files2 := upload{{"model.safetensors", safetensors}}
	u2, err := f.svc.CreateUpload(ctx, f.riskEng, "chat", registry.VersionSpec{Name: "v2", Runtime: "vllm"}, files2.manifest())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.svc.PutChunk(ctx, f.riskEng, u2.ID, digest(safetensors), bytes.NewReader(safetensors)); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(f.store.Dir(), "uploads", u2.ID)
	if _, err := os.Stat(filepath.Join(dir, digest(safetensors))); err != nil {
		t.Fatalf("the chunk is not kept: %v", err)
	}
	clock.Advance(registry.UploadTTL - time.Second)
	if _, err := f.svc.Upload(ctx, f.riskEng, u2.ID); err != nil {
		t.Errorf("a second before it expires: %v", err)
	}
	clock.Advance(time.Second)
	if _, err := f.svc.Upload(ctx, f.riskEng, u2.ID); !errors.Is(err, db.ErrNotFound) {
		t.Errorf("an expired session: %v; want not found", err)
	}
	if n, err := f.svc.SweepUploads(ctx); err != nil || n != 2 {
		t.Errorf("sweep = %d, %v; want both sessions removed", n, err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the expired session's chunks are still there: %v", err)
	}
	if _, err := f.svc.Version(ctx, f.riskEng, "chat", "v1"); err != nil {
		t.Errorf("the completed version went with its session: %v", err)
	}
}
