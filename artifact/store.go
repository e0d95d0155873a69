package artifact

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sync"
)

// A Store keeps blobs on local disk under their sha256, at
// <dir>/sha256/<first two hex digits>/<digest>, so the same content is
// stored once and a blob's name proves its content. Blobs are written to a
// temporary file in <dir>/tmp and renamed into place, so a reader never sees
// a partial blob. A Store is safe for concurrent use.
//
// Blobs are shared by every version whose manifest lists their digest. An
// Upload holds the blobs it adds until it ends, and a failed upload removes
// each of its blobs that no other upload of this Store holds and no recorded
// version references; holds live in memory, so the processes sharing a
// store directory must be one.
type Store struct {
	dir string

	mu    sync.Mutex     // orders holds, renames into place and removals
	holds map[string]int // digest → uploads in progress holding it
}

// InUse reports which of digests a recorded version still references. It is
// how a Store, which knows nothing of versions, learns which blobs of a
// failed upload it may remove; the registry answers from the manifests of
// every team's versions.
type InUse func(ctx context.Context, digests []string) (map[string]bool, error)

// A Blob is one stored file.
type Blob struct {
	// Digest is the lowercase hex sha256 of the content.
	Digest string `json:"digest"`
	// Size is the content length in bytes.
	Size int64 `json:"size"`
	// Format is what Detect recognised the content as.
	Format Format `json:"format"`
	// External lists the external data files an ONNX model's tensors name,
	// as written in it (relative to the model's directory); an upload
	// accepts the model only when each is a file of its manifest.
	External []string `json:"external,omitempty"`
}

// NewStore returns a store rooted at dir, creating its directories.
func NewStore(dir string) (*Store, error) {
	for _, d := range []string{dir, filepath.Join(dir, "sha256"), filepath.Join(dir, "tmp")} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			return nil, fmt.Errorf("create artifact store: %w", err)
		}
	}
	return &Store{dir: dir, holds: map[string]int{}}, nil
}

// Dir returns the store's root directory.
func (s *Store) Dir() string { return s.dir }

func (s *Store) path(digest string) string {
	return filepath.Join(s.dir, "sha256", digest[:2], digest)
}

// Put streams r into the store while hashing it, refuses it with a
// *Rejection wrapping ErrTooLarge as soon as it passes limit bytes, inspects
// the content with Detect (name is used for the checks and the messages,
// not for storage), and moves the blob into place. Content already stored
// is kept as it is. A refused or failed Put leaves nothing behind. A blob
// put here is not held: a failed upload that held the same content may
// remove it when no version references it.
func (s *Store) Put(ctx context.Context, name string, r io.Reader, limit int64) (Blob, error) {
	return s.put(ctx, name, r, limit, false)
}

// put is Put; with hold, the blob is also held, from the moment it is in
// place, until release or discard.
func (s *Store) put(ctx context.Context, name string, r io.Reader, limit int64, hold bool) (Blob, error) {
	if limit < 0 {
		return Blob{}, fmt.Errorf("put %s: negative limit %d", name, limit)
	}
	tmp, err := os.CreateTemp(filepath.Join(s.dir, "tmp"), "put-*")
	if err != nil {
		return Blob{}, fmt.Errorf("put %s: %w", name, err)
	}
	defer func() {
		tmp.Close()
		os.Remove(tmp.Name()) // a no-op once renamed into place
	}()

	h := sha256.New()
	read := limit
	if read < math.MaxInt64 {
		read++ // one byte more than allowed tells a file at the limit from one past it
	}
	n, err := io.Copy(io.MultiWriter(tmp, h), io.LimitReader(ctxReader{ctx, r}, read))
	if err != nil {
		return Blob{}, fmt.Errorf("put %s: %w", name, err)
	}
	if n > limit {
		return Blob{}, tooLarge(name, "file is larger than the limit of %d bytes", limit)
	}
	format, external, err := detectFile(name, io.NewSectionReader(tmp, 0, n), n)
	if err != nil {
		return Blob{}, err
	}
	b := Blob{Digest: hex.EncodeToString(h.Sum(nil)), Size: n, Format: format, External: external}

	dst := s.path(b.Digest)
	// Flush before taking the lock, which removals wait on; a blob that is
	// already stored needs neither (unless it is removed meanwhile).
	synced := false
	flush := func() error {
		if synced {
			return nil
		}
		synced = true
		if err := tmp.Chmod(0o440); err != nil {
			return err
		}
		return tmp.Sync()
	}
	if _, err := os.Stat(dst); err != nil {
		if err := flush(); err != nil {
			return Blob{}, fmt.Errorf("put %s: %w", name, err)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := os.Stat(dst); err != nil {
		if err := flush(); err != nil {
			return Blob{}, fmt.Errorf("put %s: %w", name, err)
		}
		if err := os.MkdirAll(filepath.Dir(dst), 0o750); err != nil {
			return Blob{}, fmt.Errorf("put %s: %w", name, err)
		}
		if err := os.Rename(tmp.Name(), dst); err != nil {
			return Blob{}, fmt.Errorf("put %s: %w", name, err)
		}
	}
	if hold {
		s.holds[b.Digest]++
	}
	return b, nil
}

// unhold drops one hold on each of digests (a digest listed twice was held
// twice) and returns those no upload holds any more. The caller holds s.mu.
func (s *Store) unhold(digests []string) []string {
	var free []string
	for _, d := range digests {
		if s.holds[d]--; s.holds[d] <= 0 {
			delete(s.holds, d)
			if !slices.Contains(free, d) {
				free = append(free, d)
			}
		}
	}
	return free
}

// release drops the holds of an upload whose version is recorded.
func (s *Store) release(digests []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.unhold(digests)
}

// discard drops the holds of a failed upload and removes each of its blobs
// no upload holds any more and inUse does not report as referenced. inUse
// runs under the lock that orders holds, renames and removals, so no upload
// can take a hold between the check and the removal, and a version recorded
// before its upload released its holds is always seen. An error leaves the
// blobs it concerns in place.
func (s *Store) discard(ctx context.Context, digests []string, inUse InUse) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	free := s.unhold(digests)
	if len(free) == 0 {
		return nil
	}
	used, err := inUse(ctx, free)
	if err != nil {
		return fmt.Errorf("remove blobs of a failed upload: %w", err)
	}
	var errs []error
	for _, d := range free {
		if used[d] {
			continue
		}
		if err := os.Remove(s.path(d)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("remove blob of a failed upload: %w", err))
		}
	}
	return errors.Join(errs...)
}

// Open returns the content of a stored blob, as a read-only file so that it
// can be served in ranges. The error wraps ErrNotFound when the store does
// not hold it.
func (s *Store) Open(digest string) (*os.File, error) {
	if !IsDigest(digest) {
		return nil, fmt.Errorf("open blob %q: not a sha256 digest: %w", digest, ErrNotFound)
	}
	f, err := os.Open(s.path(digest))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("open blob %s: %w", digest, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("open blob %s: %w", digest, err)
	}
	return f, nil
}

// Verify hashes a stored blob again. The error wraps ErrCorrupt when the
// content on disk no longer matches its digest, and ErrNotFound when the
// blob is missing.
func (s *Store) Verify(digest string) error {
	rc, err := s.Open(digest)
	if err != nil {
		return err
	}
	defer rc.Close()
	h := sha256.New()
	if _, err := io.Copy(h, rc); err != nil {
		return fmt.Errorf("verify blob %s: %w", digest, err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != digest {
		return fmt.Errorf("verify blob %s: content hashes to %s: %w", digest, got, ErrCorrupt)
	}
	return nil
}

// ctxReader stops a copy when its context ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
