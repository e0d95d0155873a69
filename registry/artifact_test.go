package registry_test

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"modelplane/artifact"
	"modelplane/db"
	"modelplane/registry"
)

// TestArtifactServesManifestsAndFiles: registering uploaded files stores the
// canonical manifest under its digest; Artifact serves it and every file any
// version lists, stores a manifest again when its blob is gone, and refuses
// digests no version needs and files kept elsewhere.
func TestArtifactServesManifestsAndFiles(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := t.Context()
	f.model(t, "llama")
	up := upload{{"model.safetensors", safetensors}, {"config.json", []byte(configJSON)}}
	v, err := f.svc.RegisterVersion(ctx, f.riskEng, "llama", registry.VersionSpec{Name: "v1", Runtime: "vllm"}, up.manifest(), up.files())
	if err != nil {
		t.Fatal(err)
	}
	manDigest, ok := artifact.ManifestDigest(v.ArtifactURI)
	if !ok || !f.stored(t, manDigest) {
		t.Fatalf("manifest %s of %s is not stored", manDigest, v.ArtifactURI)
	}
	read := func(d string) []byte {
		t.Helper()
		fh, err := f.svc.Artifact(ctx, d)
		if err != nil {
			t.Fatalf("Artifact(%s): %v", d, err)
		}
		defer fh.Close()
		b, err := io.ReadAll(fh)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	if got := read(digest(safetensors)); string(got) != string(safetensors) {
		t.Errorf("file = %q; want the uploaded safetensors", got)
	}
	man, err := artifact.ParseManifest(read(manDigest))
	if err != nil || man.Digest() != manDigest || man["config.json"] != digest([]byte(configJSON)) {
		t.Fatalf("manifest = %v, %v; want the version's, hashing to %s", man, err, manDigest)
	}

	// A version registered before manifests were stored: its manifest is
	// stored when first asked for.
	if err := os.Remove(filepath.Join(f.store.Dir(), "sha256", manDigest[:2], manDigest)); err != nil {
		t.Fatal(err)
	}
	if got := read(manDigest); digest(got) != manDigest {
		t.Errorf("restored manifest hashes to %s; want %s", digest(got), manDigest)
	}

	f.model(t, "ext")
	elsewhere := upload{{"model.safetensors", []byte("bytes kept in s3")}}
	if _, err := f.svc.RegisterVersion(ctx, f.riskEng, "ext", registry.VersionSpec{Name: "e1", Runtime: "vllm", Format: "safetensors",
		ArtifactURI: "s3://models/ext/e1"}, elsewhere.manifest(), nil); err != nil {
		t.Fatal(err)
	}
	extMan, _ := artifact.ParseManifest(elsewhere.manifest())
	for name, d := range map[string]string{
		"unreferenced":            digest([]byte("nothing lists this")),
		"external manifest":       extMan.Digest(),
		"external file, unstored": digest([]byte("bytes kept in s3")),
		"not a digest":            "../../etc/passwd",
	} {
		if _, err := f.svc.Artifact(ctx, d); !errors.Is(err, db.ErrNotFound) {
			t.Errorf("%s: Artifact = %v; want ErrNotFound", name, err)
		}
	}
}
