package registry

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"

	"modelplane/artifact"
	"modelplane/auth"
	"modelplane/db"
)

// putManifest stores the canonical manifest of a version as a blob under its
// digest, so that node agents fetch it like any file
// (GET /internal/artifacts/{sha256}) and a node's desired state names only
// the digest.
func (s *Service) putManifest(ctx context.Context, man artifact.Manifest) error {
	c := man.Canonical()
	b, err := s.store.Put(ctx, "manifest.json", bytes.NewReader(c), int64(len(c)))
	if err != nil {
		return fmt.Errorf("store manifest: %w", err)
	}
	if b.Digest != man.Digest() {
		return fmt.Errorf("store manifest: stored as %s, want %s", b.Digest, man.Digest())
	}
	return nil
}

// Artifact opens a stored blob that some version, of any team, references:
// one of its files or its manifest. It is for node agents, which fetch the
// files of whatever replica they run; they are authenticated by the HTTP
// layer, and what they may fetch is what the platform placed, so no team
// scope applies. A digest no version references, or one whose files the
// store does not hold (a version kept elsewhere), is db.ErrNotFound. A
// manifest registered before manifests were stored is stored on first use.
func (s *Service) Artifact(ctx context.Context, digest string) (*os.File, error) {
	if !artifact.IsDigest(digest) {
		return nil, fmt.Errorf("artifact %q: %w", digest, db.ErrNotFound)
	}
	q := db.New(s.pool)
	ok, err := q.ModelVersionDigestReferenced(ctx, digest)
	if err != nil {
		return nil, fmt.Errorf("artifact %s: %w", digest, err)
	}
	if !ok {
		return nil, fmt.Errorf("artifact %s: %w", digest, db.ErrNotFound)
	}
	f, err := s.open(digest)
	if !errors.Is(err, db.ErrNotFound) {
		return f, err
	}
	raw, merr := q.ModelVersionManifestByDigest(ctx, digest)
	if errors.Is(merr, db.ErrNotFound) {
		return nil, err // a file the store does not hold
	}
	if merr != nil {
		return nil, fmt.Errorf("artifact %s: %w", digest, merr)
	}
	man, merr := artifact.ParseManifest(raw)
	if merr != nil || man.Digest() != digest {
		return nil, fmt.Errorf("artifact %s: recorded manifest does not hash to its digest", digest)
	}
	if err := s.putManifest(ctx, man); err != nil {
		return nil, err
	}
	return s.open(digest)
}

// VersionFile opens the file at path of a version visible to the caller, and
// returns its digest. A path the manifest does not list, and a file the
// store does not hold (a version kept elsewhere), are db.ErrNotFound like a
// version of another team.
func (s *Service) VersionFile(ctx context.Context, p *auth.Principal, model, version, path string) (*os.File, string, error) {
	v, err := s.Version(ctx, p, model, version)
	if err != nil {
		return nil, "", err
	}
	digest, ok := v.Manifest[path]
	if !ok {
		return nil, "", fmt.Errorf("file %q of %s/%s: %w", path, model, version, db.ErrNotFound)
	}
	if _, stored := artifact.ManifestDigest(v.ArtifactURI); !stored {
		return nil, "", fmt.Errorf("file %q of %s/%s: kept at %s: %w", path, model, version, v.ArtifactURI, db.ErrNotFound)
	}
	f, err := s.open(digest)
	if err != nil {
		return nil, "", err
	}
	return f, digest, nil
}

// open opens a blob, a missing one as db.ErrNotFound.
func (s *Service) open(digest string) (*os.File, error) {
	f, err := s.store.Open(digest)
	if errors.Is(err, artifact.ErrNotFound) {
		return nil, fmt.Errorf("%w: %w", err, db.ErrNotFound)
	}
	return f, err
}
