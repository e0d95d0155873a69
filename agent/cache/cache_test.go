package cache_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"modelplane/agent/cache"
	"modelplane/artifact"
	"modelplane/auth"
	"modelplane/busapi"
	"modelplane/controlplane"
	"modelplane/handlers"
	"modelplane/internal/pgtest"
	"modelplane/registry"
	"modelplane/serveapi"
)

func TestMain(m *testing.M) {
	code := m.Run()
	pgtest.Stop()
	os.Exit(code)
}

const token = "agent-token-for-cache-tests"

var system = &auth.Principal{Name: "test-seed", Via: "system", PlatformRole: auth.RolePlatformAdmin}

// plane is a real control plane's HTTP handler over PostgreSQL and a real
// artifact store, behind a hook that lets a test make it misbehave, and a
// log of the artifact requests it got.
type plane struct {
	t   *testing.T
	reg *registry.Service
	URL string

	mu   sync.Mutex
	log  []request
	hook func(w http.ResponseWriter, r *http.Request, digest string, n int) http.ResponseWriter
}

// request is one artifact request: its digest and Range header.
type request struct{ digest, rng string }

func newPlane(t *testing.T) *plane {
	t.Helper()
	ctx := t.Context()
	pool := pgtest.New(t)
	cp, err := controlplane.New(controlplane.Stores{Pool: pool}, controlplane.Config{ArtifactDir: t.TempDir(), MaxUploadBytes: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cp.Tenant.CreateTeam(ctx, system, "risk", "risk"); err != nil {
		t.Fatal(err)
	}
	if _, err := cp.Registry.CreateModel(ctx, system, registry.ModelSpec{Team: "risk", Name: "m", Task: registry.TaskClassification}); err != nil {
		t.Fatal(err)
	}
	h := handlers.New(handlers.Deps{Set: &cp.Set, AgentToken: token, MaxBodyBytes: handlers.DefaultMaxBodyBytes}).Handler()
	p := &plane{t: t, reg: cp.Registry}
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if d, ok := strings.CutPrefix(r.URL.Path, "/internal/artifacts/"); ok {
			p.mu.Lock()
			n := 0
			for _, q := range p.log {
				if q.digest == d {
					n++
				}
			}
			p.log = append(p.log, request{d, r.Header.Get("Range")})
			hook := p.hook
			p.mu.Unlock()
			if hook != nil {
				w = hook(w, r, d, n)
				if w == nil {
					return
				}
			}
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	p.URL = ts.URL
	return p
}

// requests returns the artifact requests for digest so far.
func (p *plane) requests(digest string) []request {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []request
	for _, q := range p.log {
		if q.digest == digest {
			out = append(out, q)
		}
	}
	return out
}

func (p *plane) setHook(h func(w http.ResponseWriter, r *http.Request, digest string, n int) http.ResponseWriter) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.hook = h
}

// version registers a version of model m with files and returns the spec
// of a replica of it.
func (p *plane) version(name string, files map[string][]byte) busapi.ReplicaSpec {
	p.t.Helper()
	man := artifact.Manifest{}
	for path, b := range files {
		man[path] = digest(b)
	}
	v, err := p.reg.RegisterVersion(p.t.Context(), system, "m", registry.VersionSpec{Name: name, Runtime: "onnxruntime"}, man.Canonical(),
		func(u *artifact.Upload) error {
			for path, b := range files {
				if err := u.Add(context.Background(), path, bytes.NewReader(b)); err != nil {
					return err
				}
			}
			return nil
		})
	if err != nil {
		p.t.Fatal(err)
	}
	d, ok := artifact.ManifestDigest(v.ArtifactURI)
	if !ok {
		p.t.Fatalf("version %s has artifact uri %s", name, v.ArtifactURI)
	}
	return busapi.ReplicaSpec{ID: "rep-" + name, Version: name, Runtime: "onnxruntime", Manifest: d}
}

func digest(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// weights is a safetensors file of n float32 ones whose header carries tag.
func weights(tag string, n int) []byte {
	header := fmt.Sprintf(`{"w":{"dtype":"F32","shape":[%d],"data_offsets":[0,%d]},"__metadata__":{"tag":%q}}`, n, 4*n, tag)
	var b bytes.Buffer
	_ = binary.Write(&b, binary.LittleEndian, uint64(len(header)))
	b.WriteString(header)
	b.Write(bytes.Repeat([]byte{0, 0, 128, 63}, n))
	return b.Bytes()
}

func newCache(t *testing.T, p *plane, dir string, limit int64) *cache.Cache {
	t.Helper()
	c, err := cache.New(cache.Config{Dir: dir, LimitBytes: limit, URL: p.URL, Egress: loopback, Token: token})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// checkDir fails unless dir holds exactly files (and the settings file
// when settings is set).
func checkDir(t *testing.T, dir string, files map[string][]byte, settings bool) {
	t.Helper()
	seen := 0
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		rel = filepath.ToSlash(rel)
		got, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		seen++
		if rel == serveapi.ConfigFile && settings {
			if !json.Valid(got) {
				t.Errorf("%s is not JSON: %s", rel, got)
			}
			return nil
		}
		if want, ok := files[rel]; !ok || !bytes.Equal(got, want) {
			t.Errorf("%s in the model dir: %d bytes, listed %v; want the version's file", rel, len(got), ok)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := len(files)
	if settings {
		want++
	}
	if seen != want {
		t.Errorf("model dir holds %d files; want %d", seen, want)
	}
}

// blob is where the cache keeps digest d (the layout doc.go describes).
func blob(dir, d string) string { return filepath.Join(dir, "blobs", "sha256", d[:2], d) }

func exists(t *testing.T, path string) bool {
	t.Helper()
	_, err := os.Stat(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	return err == nil
}

func TestPrepareFetchesVerifiesAndReusesFiles(t *testing.T) {
	t.Parallel()
	p := newPlane(t)
	files := map[string][]byte{"model.safetensors": weights("a", 16<<10), "tokenizer/vocab.txt": []byte("a\nb\nc\n"), "README.txt": []byte("hello\n")}
	spec := p.version("v1", files)
	spec.Settings = json.RawMessage(`{"model":"ep","version":"v1","format":"safetensors"}`)
	dir := t.TempDir()
	c := newCache(t, p, dir, 0)

	got, err := c.Prepare(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if got.Fetched != 4 {
		t.Errorf("first preparation fetched %d blobs; want 4 (manifest and 3 files)", got.Fetched)
	}
	checkDir(t, got.Dir, files, true)
	var cfg serveapi.Config
	if b, err := os.ReadFile(filepath.Join(got.Dir, serveapi.ConfigFile)); err != nil || json.Unmarshal(b, &cfg) != nil || cfg.Model != "ep" {
		t.Errorf("settings file = %+v, %v; want the spec's settings", cfg, err)
	}
	fi, err := os.Stat(filepath.Join(got.Dir, "model.safetensors"))
	if err != nil || fi.Mode().Perm()&0o222 != 0 {
		t.Errorf("model file mode = %v, %v; want read-only", fi.Mode(), err)
	}

	// A second replica of the same version is a hit and asks for nothing.
	before := len(p.requests(spec.Manifest))
	spec2 := spec
	spec2.ID = "rep-v1-b"
	got2, err := c.Prepare(t.Context(), spec2)
	if err != nil {
		t.Fatal(err)
	}
	if got2.Fetched != 0 || len(p.requests(spec.Manifest)) != before || got2.Dir == got.Dir {
		t.Errorf("second replica: fetched %d, dir %s (first %s); want a hit in its own directory", got2.Fetched, got2.Dir, got.Dir)
	}
	// Its files were verified when fetched and are unchanged since: linking
	// them into two directories does not make them worth hashing again.
	if got.Hashed != 4 || got2.Hashed != 0 {
		t.Errorf("files hashed: %d on the miss, %d on the hit; want 4 and 0", got.Hashed, got2.Hashed)
	}
	checkDir(t, got2.Dir, files, true)
	if st := c.Stats(); st.Hits != 1 || st.Misses != 1 || st.Versions != 1 || st.BytesUsed < int64(len(files["model.safetensors"])) {
		t.Errorf("stats = %+v; want 1 hit, 1 miss, 1 version and the files' bytes", st)
	}

	// After an agent restart the cache still holds the version.
	c2 := newCache(t, p, dir, 0)
	spec3 := spec
	spec3.ID = "rep-v1-c"
	got3, err := c2.Prepare(t.Context(), spec3)
	if err != nil || got3.Fetched != 0 || got3.Hashed != 0 {
		t.Fatalf("after a restart: fetched %d, hashed %d, %v; want a hit that hashes nothing", got3.Fetched, got3.Hashed, err)
	}
	checkDir(t, got3.Dir, files, true)

	// A replica released loses its directory, not the cached files.
	c2.Release(spec3.ID)
	if exists(t, got3.Dir) || !exists(t, blob(dir, digest(files["model.safetensors"]))) {
		t.Errorf("after release: dir exists %v, blob exists %v; want the dir gone and the blob kept",
			exists(t, got3.Dir), exists(t, blob(dir, digest(files["model.safetensors"]))))
	}
	if got4, err := c2.Prepare(t.Context(), spec3); err != nil || got4.Fetched != 0 || got4.Hashed != 0 {
		t.Errorf("prepared again after its release: fetched %d, hashed %d, %v; want a hit that hashes nothing", got4.Fetched, got4.Hashed, err)
	}
}

// TestTamperedCacheFileIsFetchedAgain: a cached file changed on disk is
// hashed again, found wrong, deleted and fetched; the runtime never sees
// the tampered bytes.
func TestTamperedCacheFileIsFetchedAgain(t *testing.T) {
	t.Parallel()
	p := newPlane(t)
	files := map[string][]byte{"model.safetensors": weights("t", 4096)}
	spec := p.version("v1", files)
	dir := t.TempDir()
	c := newCache(t, p, dir, 0)
	if _, err := c.Prepare(t.Context(), spec); err != nil {
		t.Fatal(err)
	}
	c.Release(spec.ID)
	d := digest(files["model.safetensors"])
	path := blob(dir, d)
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	bad := bytes.Clone(files["model.safetensors"])
	bad[len(bad)-1] ^= 0xff // same size, one byte off
	if err := os.WriteFile(path, bad, 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := c.Prepare(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	checkDir(t, got.Dir, files, false)
	if got.Hashed != 2 {
		t.Errorf("files hashed after tampering: %d; want 2 (the tampered one, then its new download)", got.Hashed)
	}
	if n := len(p.requests(d)); n != 2 || got.Fetched != 1 {
		t.Errorf("file fetched %d times in all, %d now; want 2 and 1 (again after tampering)", n, got.Fetched)
	}
}

// corrupt answers with the artifact's bytes, one of them flipped.
func corrupt(w http.ResponseWriter) http.ResponseWriter { return &flipWriter{ResponseWriter: w} }

type flipWriter struct {
	http.ResponseWriter
	done bool
}

func (f *flipWriter) Write(p []byte) (int, error) {
	if !f.done && len(p) > 0 {
		p = bytes.Clone(p)
		p[0] ^= 0xff
		f.done = true
	}
	return f.ResponseWriter.Write(p)
}

func TestCorruptDownloads(t *testing.T) {
	t.Parallel()
	t.Run("once: fetched again and served", func(t *testing.T) {
		t.Parallel()
		p := newPlane(t)
		files := map[string][]byte{"model.safetensors": weights("c1", 1024)}
		spec := p.version("v1", files)
		d := digest(files["model.safetensors"])
		p.setHook(func(w http.ResponseWriter, _ *http.Request, dg string, n int) http.ResponseWriter {
			if dg == d && n == 0 {
				return corrupt(w)
			}
			return w
		})
		got, err := newCache(t, p, t.TempDir(), 0).Prepare(t.Context(), spec)
		if err != nil {
			t.Fatal(err)
		}
		checkDir(t, got.Dir, files, false)
		if n := len(p.requests(d)); n != 2 {
			t.Errorf("file fetched %d times; want 2", n)
		}
	})
	t.Run("twice: the replica fails with the reason", func(t *testing.T) {
		t.Parallel()
		p := newPlane(t)
		files := map[string][]byte{"weights/model.safetensors": weights("c2", 1024), "vocab.txt": []byte("x\n")}
		spec := p.version("v1", files)
		d := digest(files["weights/model.safetensors"])
		p.setHook(func(w http.ResponseWriter, _ *http.Request, dg string, _ int) http.ResponseWriter {
			if dg == d {
				return corrupt(w)
			}
			return w
		})
		dir := t.TempDir()
		c := newCache(t, p, dir, 0)
		_, err := c.Prepare(t.Context(), spec)
		if !errors.Is(err, cache.ErrDigest) || !strings.Contains(err.Error(), "weights/model.safetensors") {
			t.Fatalf("Prepare = %v; want ErrDigest naming the file", err)
		}
		if n := len(p.requests(d)); n != 2 {
			t.Errorf("file fetched %d times; want 2", n)
		}
		if exists(t, c.Dir(spec.ID)) || exists(t, blob(dir, d)) || exists(t, filepath.Join(dir, "partial", d)) {
			t.Error("a model dir, blob or partial file of the bad content is left")
		}
	})
}

// cutWriter passes the first n body bytes, then breaks the connection.
type cutWriter struct {
	http.ResponseWriter
	left int
}

func (c *cutWriter) Write(p []byte) (int, error) {
	if len(p) <= c.left {
		c.left -= len(p)
		return c.ResponseWriter.Write(p)
	}
	_, _ = c.ResponseWriter.Write(p[:c.left])
	c.left = 0
	_ = http.NewResponseController(c.ResponseWriter).Flush()
	panic(http.ErrAbortHandler) // the server drops the connection mid-body
}

func TestResumeAfterCutOffDownload(t *testing.T) {
	t.Parallel()
	p := newPlane(t)
	files := map[string][]byte{"model.safetensors": weights("r", 64<<10)}
	spec := p.version("v1", files)
	d := digest(files["model.safetensors"])
	const cut = 100_000
	p.setHook(func(w http.ResponseWriter, _ *http.Request, dg string, n int) http.ResponseWriter {
		if dg == d && n == 0 {
			return &cutWriter{ResponseWriter: w, left: cut}
		}
		return w
	})
	got, err := newCache(t, p, t.TempDir(), 0).Prepare(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	checkDir(t, got.Dir, files, false)
	reqs := p.requests(d)
	if len(reqs) != 2 || reqs[0].rng != "" || reqs[1].rng != fmt.Sprintf("bytes=%d-", cut) {
		t.Errorf("requests = %+v; want a whole one, then one resuming at byte %d", reqs, cut)
	}
}

// TestRestartMidDownloadResumes: an agent that stops mid-download (here:
// the control plane goes away after cutting the body) keeps the partial
// file, and the next run resumes it with a Range request.
func TestRestartMidDownloadResumes(t *testing.T) {
	t.Parallel()
	p := newPlane(t)
	files := map[string][]byte{"model.safetensors": weights("rr", 64<<10)}
	spec := p.version("v1", files)
	d := digest(files["model.safetensors"])
	const cut = 50_000
	p.setHook(func(w http.ResponseWriter, _ *http.Request, dg string, n int) http.ResponseWriter {
		if dg != d {
			return w
		}
		if n == 0 {
			return &cutWriter{ResponseWriter: w, left: cut}
		}
		http.Error(w, "down for maintenance", http.StatusServiceUnavailable)
		return nil
	})
	dir := t.TempDir()
	if _, err := newCache(t, p, dir, 0).Prepare(t.Context(), spec); err == nil {
		t.Fatal("Prepare succeeded while the control plane was away")
	}
	if fi, err := os.Stat(filepath.Join(dir, "partial", d)); err != nil || fi.Size() != cut {
		t.Fatalf("partial file = %v, %v; want %d bytes kept", fi, err, cut)
	}
	p.setHook(nil)
	c := newCache(t, p, dir, 0) // the agent's next run
	if st := c.Stats(); st.BytesUsed < cut {
		t.Errorf("restarted cache uses %d bytes; want the partial's %d counted", st.BytesUsed, cut)
	}
	got, err := c.Prepare(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	checkDir(t, got.Dir, files, false)
	reqs := p.requests(d)
	if last := reqs[len(reqs)-1]; last.rng != fmt.Sprintf("bytes=%d-", cut) {
		t.Errorf("last request = %+v; want it to resume at byte %d", last, cut)
	}
}

// TestEvictionSparesLiveVersionsAndSharedFiles: above the high watermark
// the least recently used versions go until the cache is under the low
// one; a version a replica holds stays, even the oldest, and so does every
// file it shares with an evicted one.
func TestEvictionSparesLiveVersionsAndSharedFiles(t *testing.T) {
	t.Parallel()
	p := newPlane(t)
	const n = 2500 // floats: each file is a little over 10,000 bytes
	shared := weights("shared", n)
	a := p.version("a", map[string][]byte{"a.safetensors": weights("a", n), "shared.safetensors": shared})
	b := p.version("b", map[string][]byte{"b.safetensors": weights("b", n), "shared.safetensors": shared})
	cv := p.version("c", map[string][]byte{"c.safetensors": weights("c", n)})
	dv := p.version("d", map[string][]byte{"d.safetensors": weights("d", n)})
	size := int64(len(shared))
	// Five files' worth: four files and the manifests are above 80 %.
	dir := t.TempDir()
	c := newCache(t, p, dir, 5*size)
	prep := func(spec busapi.ReplicaSpec) {
		t.Helper()
		if _, err := c.Prepare(t.Context(), spec); err != nil {
			t.Fatal(err)
		}
	}
	prep(a) // live, and the least recently used of all
	prep(b)
	c.Release(b.ID)
	prep(cv) // four files: above 80 %, so b goes (c is starting)
	c.Release(cv.ID)
	has := func(tag string) bool { return exists(t, blob(dir, digest(weights(tag, n)))) }
	if !has("a") || !has("shared") || has("b") || !has("c") {
		t.Fatalf("after c: a %v shared %v b %v c %v; want b evicted, the live a and its shared file kept", has("a"), has("shared"), has("b"), has("c"))
	}
	if st := c.Stats(); st.Evictions != 1 || st.Versions != 2 || float64(st.BytesUsed) > cache.Low*float64(st.BytesLimit) {
		t.Errorf("stats = %+v; want 1 eviction, 2 versions, under the low watermark", st)
	}
	prep(dv)
	if !has("a") || !has("shared") || has("c") || !has("d") {
		t.Fatalf("after d: a %v shared %v c %v d %v; want c evicted and a kept", has("a"), has("shared"), has("c"), has("d"))
	}
	// The live replica's directory is intact.
	if _, err := os.Stat(filepath.Join(c.Dir(a.ID), "shared.safetensors")); err != nil {
		t.Errorf("live replica's shared file: %v", err)
	}
}

func TestWrongTokenIsRefused(t *testing.T) {
	t.Parallel()
	p := newPlane(t)
	spec := p.version("v1", map[string][]byte{"model.safetensors": weights("x", 16)})
	c, err := cache.New(cache.Config{Dir: t.TempDir(), URL: p.URL, Egress: loopback, Token: "not-the-token"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Prepare(t.Context(), spec); err == nil || !strings.Contains(err.Error(), "credentials") {
		t.Errorf("Prepare = %v; want the credentials refused", err)
	}
}
