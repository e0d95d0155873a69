package registry

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/coder/quartz"

	"modelplane/artifact"
	"modelplane/auth"
	"modelplane/db"
	"modelplane/field"
	"modelplane/service"
)

// An upload session takes a version's files as chunks addressed by their
// sha256, so that an upload cut off part-way resumes with the chunks the
// session lacks instead of from zero (issue 30). The chunks are kept, as
// files in the session's directory of the artifact store, until the session
// expires; completing it streams each file from its chunks through the same
// checks as any upload (RegisterVersion) and records the version on the
// session, so that completing again answers the same version.

// UploadTTL is how long an upload session keeps its chunks.
const UploadTTL = 24 * time.Hour

// MaxChunkBytes bounds one chunk; a client splits files into chunks of at
// most this size.
const MaxChunkBytes = 64 << 20

// UploadSweepInterval is how often expired sessions are removed.
const UploadSweepInterval = 10 * time.Minute

// UploadSession is an upload in progress (or completed) as the API shows it.
type UploadSession struct {
	ID       string            `json:"id" doc:"The session's id, to resume it."`
	Model    string            `json:"model"`
	Version  string            `json:"version" doc:"The name the version gets on completion."`
	Manifest map[string]string `json:"manifest"`
	// Chunks are the chunks the session holds, by sha256.
	Chunks        []Chunk   `json:"chunks" doc:"The chunks the session holds: send only the others."`
	StoredBytes   int64     `json:"stored_bytes"`
	MaxChunkBytes int64     `json:"max_chunk_bytes"`
	Completed     bool      `json:"completed" doc:"The version is registered; completing again answers it."`
	CreatedBy     string    `json:"created_by"`
	CreatedAt     time.Time `json:"created_at"`
	ExpiresAt     time.Time `json:"expires_at"`
}

// Chunk is one stored chunk of an upload session.
type Chunk struct {
	SHA256 string `json:"sha256"`
	Size   int64  `json:"size"`
}

// uploadID is the form of a session id: whatever else a caller names is
// not found, and never reaches a file path.
var uploadID = regexp.MustCompile(`^up_[0-9a-f]{32}$`)

// WithClock sets the clock upload sessions expire on (quartz.NewReal()
// without one). It returns s.
func (s *Service) WithClock(c quartz.Clock) *Service {
	s.clock = c
	return s
}

func (s *Service) now() time.Time {
	if s.clock == nil {
		return time.Now()
	}
	return s.clock.Now()
}

func (s *Service) uploadDir(id string) string { return filepath.Join(s.store.Dir(), "uploads", id) }

// CreateUpload starts an upload session for a version of model: its
// metadata and manifest are checked now, as registration would, so that a
// client learns of a bad name or manifest before it sends a byte.
func (s *Service) CreateUpload(ctx context.Context, p *auth.Principal, model string, spec VersionSpec, manifest []byte) (UploadSession, error) {
	m, err := s.Model(ctx, p, model)
	if err != nil {
		return UploadSession{}, err
	}
	if !p.CanWrite(m.TeamID) {
		return UploadSession{}, auth.ErrForbidden
	}
	var errs field.Errors
	s.checkSpec(&errs, &spec, m)
	man, err := artifact.ParseManifest(manifest)
	if err != nil {
		errs.Add("manifest", "%s", strings.TrimPrefix(err.Error(), artifact.ErrRejected.Error()+": "))
	} else {
		checkDraftModel(&errs, spec.Serving.LLM, man)
	}
	if spec.ArtifactURI != "" {
		errs.Add("metadata.artifact_uri", "must be empty when files are uploaded")
	}
	if err := errs.Err(); err != nil {
		return UploadSession{}, err
	}
	all, ids := p.Scope()
	q := db.New(s.pool)
	if _, err := q.ModelVersionGet(ctx, db.ModelVersionGetParams{ModelID: m.ID, Name: spec.Name, AllTeams: all, TeamIDs: ids}); err == nil {
		return UploadSession{}, fmt.Errorf("version %s of %s: %w", spec.Name, model, db.ErrConflict)
	}
	var raw [16]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return UploadSession{}, err
	}
	id := "up_" + hex.EncodeToString(raw[:])
	if err := os.MkdirAll(s.uploadDir(id), 0o750); err != nil {
		return UploadSession{}, fmt.Errorf("upload session: %w", err)
	}
	specJSON, _ := json.Marshal(spec)
	manJSON, _ := json.Marshal(man)
	now := s.now()
	if err := q.UploadSessionCreate(ctx, db.UploadSessionCreateParams{ID: id, TeamID: m.TeamID, ModelID: m.ID, Spec: specJSON,
		Manifest: manJSON, CreatedBy: p.Actor(), CreatedAt: now, ExpiresAt: now.Add(UploadTTL)}); err != nil {
		os.RemoveAll(s.uploadDir(id))
		return UploadSession{}, fmt.Errorf("upload session: %w", err)
	}
	return s.Upload(ctx, p, id)
}

// session reads session id as p may see it; an expired one is not found.
func (s *Service) session(ctx context.Context, p *auth.Principal, id string) (db.UploadSessionGetScopedRow, VersionSpec, error) {
	if !uploadID.MatchString(id) {
		return db.UploadSessionGetScopedRow{}, VersionSpec{}, fmt.Errorf("upload %s: %w", id, db.ErrNotFound)
	}
	all, ids := p.Scope()
	row, err := db.New(s.pool).UploadSessionGetScoped(ctx, db.UploadSessionGetScopedParams{ID: id, Now: s.now(), AllTeams: all, TeamIDs: ids})
	if err != nil {
		return row, VersionSpec{}, fmt.Errorf("upload %s: %w", id, err)
	}
	var spec VersionSpec
	if err := json.Unmarshal(row.Spec, &spec); err != nil {
		return row, spec, fmt.Errorf("upload %s: %w", id, err)
	}
	return row, spec, nil
}

// Upload returns session id with the chunks it holds.
func (s *Service) Upload(ctx context.Context, p *auth.Principal, id string) (UploadSession, error) {
	row, spec, err := s.session(ctx, p, id)
	if err != nil {
		return UploadSession{}, err
	}
	all, ids := p.Scope()
	chunks, err := db.New(s.pool).UploadChunkListScoped(ctx, db.UploadChunkListScopedParams{SessionID: id, AllTeams: all, TeamIDs: ids})
	if err != nil {
		return UploadSession{}, fmt.Errorf("upload %s chunks: %w", id, err)
	}
	out := UploadSession{ID: row.ID, Model: row.Model, Version: spec.Name, Chunks: []Chunk{}, MaxChunkBytes: MaxChunkBytes,
		Completed: row.VersionID != nil, CreatedBy: row.CreatedBy, CreatedAt: row.CreatedAt, ExpiresAt: row.ExpiresAt}
	_ = json.Unmarshal(row.Manifest, &out.Manifest)
	for _, c := range chunks {
		out.Chunks = append(out.Chunks, Chunk{SHA256: c.Digest, Size: c.Size})
		out.StoredBytes += c.Size
	}
	return out, nil
}

// PutChunk stores the chunk read from r in session id under digest, which
// must be the sha256 of what r holds. A chunk the session holds already is
// kept as it is.
func (s *Service) PutChunk(ctx context.Context, p *auth.Principal, id, digest string, r io.Reader) (Chunk, error) {
	row, _, err := s.session(ctx, p, id)
	if err != nil {
		return Chunk{}, err
	}
	if !p.CanWrite(row.TeamID) {
		return Chunk{}, auth.ErrForbidden
	}
	if !artifact.IsDigest(digest) {
		return Chunk{}, field.Errors{{Field: "sha256", Message: "must be a lowercase hex sha256"}}
	}
	if row.VersionID != nil {
		return Chunk{}, &uploadConflict{"upload " + id + " is completed"}
	}
	all, ids := p.Scope()
	q := db.New(s.pool)
	stored, err := q.UploadChunkBytesScoped(ctx, db.UploadChunkBytesScopedParams{SessionID: id, AllTeams: all, TeamIDs: ids})
	if err != nil {
		return Chunk{}, fmt.Errorf("upload %s: %w", id, err)
	}
	limit := int64(MaxChunkBytes)
	if left := s.max.MaxTotalBytes - stored; s.max.MaxTotalBytes > 0 && left < limit {
		limit = max(left, 0)
	}
	dir := s.uploadDir(id)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return Chunk{}, fmt.Errorf("upload %s: %w", id, err)
	}
	tmp, err := os.CreateTemp(dir, "part-*")
	if err != nil {
		return Chunk{}, fmt.Errorf("upload %s: %w", id, err)
	}
	defer func() {
		tmp.Close()
		os.Remove(tmp.Name()) // a no-op once renamed into place
	}()
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(tmp, h), io.LimitReader(r, limit+1))
	if err != nil {
		return Chunk{}, fmt.Errorf("upload %s chunk: %w", id, err)
	}
	if n > limit {
		return Chunk{}, fmt.Errorf("upload %s chunk of more than %d bytes: %w", id, limit, artifact.ErrTooLarge)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != digest {
		return Chunk{}, field.Errors{{Field: "sha256", Message: "is not the sha256 of the body (" + got + ")"}}
	}
	if err := tmp.Sync(); err != nil {
		return Chunk{}, fmt.Errorf("upload %s chunk: %w", id, err)
	}
	if err := os.Rename(tmp.Name(), filepath.Join(dir, digest)); err != nil {
		return Chunk{}, fmt.Errorf("upload %s chunk: %w", id, err)
	}
	if err := q.UploadChunkAdd(ctx, db.UploadChunkAddParams{SessionID: id, TeamID: row.TeamID, Digest: digest, Size: n}); err != nil {
		return Chunk{}, fmt.Errorf("upload %s chunk: %w", id, err)
	}
	return Chunk{SHA256: digest, Size: n}, nil
}

// uploadConflict is a change a session's state refuses; its message is
// shown.
type uploadConflict struct{ msg string }

func (e *uploadConflict) Error() string { return e.msg }
func (e *uploadConflict) Shown() string { return e.msg }
func (e *uploadConflict) Unwrap() error { return db.ErrConflict }

// CompleteUpload registers the session's version from its chunks: each
// manifest path is the concatenation of the chunks files names, in order.
// It answers created false when the session was completed before (a retry),
// with the version it registered then.
func (s *Service) CompleteUpload(ctx context.Context, p *auth.Principal, id string, files map[string][]string) (_ Version, created bool, err error) {
	row, spec, err := s.session(ctx, p, id)
	if err != nil {
		return Version{}, false, err
	}
	if !p.CanWrite(row.TeamID) {
		return Version{}, false, auth.ErrForbidden
	}
	if row.VersionID != nil {
		v, err := s.Version(ctx, p, row.Model, spec.Name)
		return v, false, err
	}
	var man map[string]string
	_ = json.Unmarshal(row.Manifest, &man)
	all, ids := p.Scope()
	chunks, err := db.New(s.pool).UploadChunkListScoped(ctx, db.UploadChunkListScopedParams{SessionID: id, AllTeams: all, TeamIDs: ids})
	if err != nil {
		return Version{}, false, fmt.Errorf("upload %s chunks: %w", id, err)
	}
	have := map[string]bool{}
	for _, c := range chunks {
		have[c.Digest] = true
	}
	var errs field.Errors
	paths := make([]string, 0, len(man))
	for path := range man {
		paths = append(paths, path)
		list, ok := files[path]
		if !ok {
			errs.Add("files."+path, "is in the manifest but names no chunks")
			continue
		}
		for _, d := range list {
			if !have[d] {
				errs.Add("files."+path, "names chunk %s, which the session does not hold", d)
				break
			}
		}
	}
	for path := range files {
		if _, ok := man[path]; !ok {
			errs.Add("files."+path, "is not in the manifest")
		}
	}
	if err := errs.Err(); err != nil {
		return Version{}, false, err
	}
	slices.Sort(paths)
	dir := s.uploadDir(id)
	add := func(u *artifact.Upload) error {
		for _, path := range paths {
			r := &chunkReader{dir: dir, digests: files[path]}
			err := u.Add(ctx, path, r)
			r.close()
			if err != nil {
				return err
			}
		}
		return nil
	}
	manJSON, _ := json.Marshal(man)
	v, err := s.RegisterVersion(ctx, p, row.Model, spec, manJSON, add)
	if errors.Is(err, db.ErrConflict) {
		// A completion of this session that raced this one registered
		// the version: the same files under the same name are that one.
		if prev, gerr := s.Version(ctx, p, row.Model, spec.Name); gerr == nil && maps(prev.Manifest, man) {
			v, err = prev, nil
		}
	}
	if err != nil {
		return Version{}, false, err
	}
	err = db.InTx(ctx, s.pool, func(q *db.Queries) error {
		if _, err := q.UploadSessionLockScoped(ctx, db.UploadSessionLockScopedParams{ID: id, Now: s.now(), AllTeams: all, TeamIDs: ids}); err != nil {
			return err
		}
		return q.UploadSessionComplete(ctx, db.UploadSessionCompleteParams{ID: id, VersionID: &v.ID})
	})
	if err != nil {
		return Version{}, false, fmt.Errorf("complete upload %s: %w", id, err)
	}
	// The files are in the blob store now; the chunks are not needed.
	_ = os.RemoveAll(dir)
	return v, true, nil
}

func maps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// chunkReader reads a file as its chunks in order, opening one at a time.
type chunkReader struct {
	dir     string
	digests []string
	f       *os.File
}

func (c *chunkReader) Read(b []byte) (int, error) {
	for {
		if c.f == nil {
			if len(c.digests) == 0 {
				return 0, io.EOF
			}
			f, err := os.Open(filepath.Join(c.dir, c.digests[0]))
			if err != nil {
				return 0, fmt.Errorf("chunk %s: %w", c.digests[0], err)
			}
			c.f, c.digests = f, c.digests[1:]
		}
		n, err := c.f.Read(b)
		if errors.Is(err, io.EOF) {
			c.close()
			if n > 0 {
				return n, nil
			}
			continue
		}
		return n, err
	}
}

func (c *chunkReader) close() {
	if c.f != nil {
		c.f.Close()
		c.f = nil
	}
}

// SweepUploads removes the sessions expired by now, with their chunks, and
// returns how many.
func (s *Service) SweepUploads(ctx context.Context) (int, error) {
	q := db.New(s.pool)
	n := 0
	for {
		ids, err := q.UploadSessionsExpired(ctx, db.UploadSessionsExpiredParams{Now: s.now(), Lim: 100})
		if err != nil {
			return n, fmt.Errorf("expired uploads: %w", err)
		}
		if len(ids) == 0 {
			return n, nil
		}
		for _, id := range ids {
			if uploadID.MatchString(id) {
				if err := os.RemoveAll(s.uploadDir(id)); err != nil {
					return n, fmt.Errorf("remove upload %s: %w", id, err)
				}
			}
			if err := q.UploadSessionDelete(ctx, id); err != nil {
				return n, fmt.Errorf("remove upload %s: %w", id, err)
			}
			n++
		}
	}
}

// UploadSweeper removes expired upload sessions every UploadSweepInterval
// of the registry's clock. It may run on every control plane: a removal
// done twice is done once.
func (s *Service) UploadSweeper(log *slog.Logger) service.Service {
	clock := s.clock
	if clock == nil {
		clock = quartz.NewReal()
	}
	return service.NewFunc(func(ctx context.Context) {
		service.Tick(ctx, clock, UploadSweepInterval, nil, func(ctx context.Context) {
			if _, err := s.SweepUploads(ctx); err != nil && ctx.Err() == nil {
				log.Warn("sweep upload sessions", slog.String("error", err.Error()))
			}
		})
	})
}
