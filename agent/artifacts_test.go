package agent

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"modelplane/agent/cache"
	"modelplane/artifact"
	"modelplane/busapi"
	"modelplane/egress"
	"modelplane/internal/wait"
	"modelplane/serveapi"
)

// store serves blobs as the control plane's /internal/artifacts does (by
// digest, with ranges), except those it was told to corrupt, and counts
// requests.
type store struct {
	mu      sync.Mutex
	blobs   map[string][]byte
	corrupt map[string]bool
	asked   map[string]int
	// held, when set for a digest, makes its requests wait until it is
	// closed.
	held map[string]chan struct{}
}

func (s *store) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	d, _ := strings.CutPrefix(r.URL.Path, "/internal/artifacts/")
	s.mu.Lock()
	s.asked[d]++
	b, ok := s.blobs[d]
	if s.corrupt[d] {
		b = append(bytes.Clone(b), '!')
	}
	hold := s.held[d]
	s.mu.Unlock()
	if hold != nil {
		select {
		case <-hold:
		case <-r.Context().Done():
			return
		}
	}
	if r.Header.Get("Authorization") != "Bearer t0ken" {
		http.Error(w, "no", http.StatusUnauthorized)
		return
	}
	if !ok {
		http.NotFound(w, r)
		return
	}
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(b))
}

func (s *store) requests(d string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.asked[d]
}

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// version puts files and their manifest in the store and returns the
// manifest's digest.
func (s *store) version(files map[string][]byte) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	man := artifact.Manifest{}
	for p, b := range files {
		man[p] = sum(b)
		s.blobs[sum(b)] = b
	}
	s.blobs[man.Digest()] = man.Canonical()
	return man.Digest()
}

// dirDriver is a SimDriver that reads each replica's model directory when
// asked to start it, as a runtime would.
type dirDriver struct {
	*SimDriver
	mu   sync.Mutex
	seen map[string]map[string]string // replica → file → content
}

func (d *dirDriver) Start(ctx context.Context, spec busapi.ReplicaSpec, opts StartOptions) (Replica, error) {
	files := map[string]string{}
	if opts.ModelDir != "" {
		_ = filepath.WalkDir(opts.ModelDir, func(p string, e os.DirEntry, err error) error {
			if err == nil && !e.IsDir() {
				b, _ := os.ReadFile(p)
				rel, _ := filepath.Rel(opts.ModelDir, p)
				files[filepath.ToSlash(rel)] = string(b)
			}
			return err
		})
	}
	d.mu.Lock()
	d.seen[spec.ID] = files
	d.mu.Unlock()
	return d.SimDriver.Start(ctx, spec, opts)
}

func (d *dirDriver) files(id string) (map[string]string, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	f, ok := d.seen[id]
	return f, ok
}

// TestReplicasStartOnVerifiedModelFiles: the agent prepares a replica's
// files before the driver starts it, hands it the directory and reports the
// cache; a version whose file fails its digest twice is failed with the
// reason and never started; a sim version fetches nothing.
func TestReplicasStartOnVerifiedModelFiles(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	st := &store{blobs: map[string][]byte{}, corrupt: map[string]bool{}, asked: map[string]int{}}
	srv := httptest.NewServer(st)
	t.Cleanup(srv.Close)
	files := map[string][]byte{"model.json": []byte(`{"learner":{}}`), "extra/classes.txt": []byte("legit\nfraud\n")}
	good := st.version(files)
	badFile := []byte("weights that the store will corrupt")
	bad := st.version(map[string][]byte{"model.onnx": badFile})
	st.corrupt[sum(badFile)] = true

	c, err := cache.New(cache.Config{Dir: t.TempDir(), URL: srv.URL, Egress: loopback, Token: "t0ken", LimitBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	drv := &dirDriver{SimDriver: NewSimDriver(SimDriverConfig{Log: testLog(t)}), seen: map[string]map[string]string{}}
	t.Cleanup(func() { drv.Close(t.Context()) })
	cfg := testConfig(t, "n1", drv)
	cfg.Cache = c
	a := start(t, cfg, e.nc)

	ok := classifier("ok", 0)
	ok.Runtime, ok.Manifest, ok.Settings = "xgboost", good, json.RawMessage(`{"model":"fraud-detector","version":"v23"}`)
	broken := classifier("broken", 1)
	broken.Runtime, broken.Manifest = "onnxruntime", bad
	sim := classifier("sim", 2)
	sim.Runtime, sim.Manifest = "sim", sum([]byte("a manifest the store does not have"))
	e.put(t, "n1", 1, ok, broken, sim)

	var why any
	wait.Eventually(t, 10*time.Second, func() bool {
		rs := replicas(a)
		why = rs
		return rs["ok"].State == busapi.StateReady && rs["sim"].State == busapi.StateReady &&
			rs["broken"].State == busapi.StateFailed && strings.Contains(rs["broken"].Reason, "sha256")
	}, "want ok and sim ready, broken failed on its digest: %v", wait.Show(func() any { return why }))

	got, _ := drv.files("ok")
	for p, b := range files {
		if got[p] != string(b) {
			t.Errorf("driver saw %s = %q; want %q", p, got[p], b)
		}
	}
	if _, ok := got[serveapi.ConfigFile]; !ok || len(got) != len(files)+1 {
		t.Errorf("driver saw %v; want the files and %s", got, serveapi.ConfigFile)
	}
	if _, started := drv.files("broken"); started {
		t.Error("the replica whose file failed its digest was started")
	}
	if reason := replicas(a)["broken"].Reason; !strings.Contains(reason, "model.onnx") {
		t.Errorf("broken reason = %q; want it to name the file", reason)
	}
	if f, _ := drv.files("sim"); len(f) != 0 {
		t.Errorf("sim replica got files %v; want none", f)
	}
	cs := a.Status().Cache
	if cs == nil || cs.Misses != 1 || cs.BytesLimit != 1<<20 || cs.BytesUsed == 0 {
		t.Errorf("heartbeat cache = %+v; want one miss, the limit and the bytes used", cs)
	}
	// Each good blob was fetched once; the bad file twice per attempt (a
	// retry after the backoff may have begun); the sim version nothing.
	for _, d := range []string{good, sum(files["model.json"]), sum(files["extra/classes.txt"])} {
		if n := st.requests(d); n != 1 {
			t.Errorf("blob %s fetched %d times; want once", d, n)
		}
	}
	if n := st.requests(sum(badFile)); n < 2 {
		t.Errorf("bad file fetched %d times; want at least twice before failing", n)
	}
	if n := st.requests(sim.Manifest); n != 0 {
		t.Errorf("sim manifest fetched %d times; want never", n)
	}
}

// TestRestartKeepsAdoptedReplicasFiles: an agent restarted beside its
// running replicas keeps their model directories and fetches nothing
// again; the directory of a replica no longer desired goes.
func TestRestartKeepsAdoptedReplicasFiles(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	st := &store{blobs: map[string][]byte{}, corrupt: map[string]bool{}, asked: map[string]int{}}
	srv := httptest.NewServer(st)
	t.Cleanup(srv.Close)
	files := map[string][]byte{"model.json": []byte(`{"learner":{"v":1}}`)}
	man := st.version(files)
	cacheDir := t.TempDir()
	newCache := func() *cache.Cache {
		c, err := cache.New(cache.Config{Dir: cacheDir, URL: srv.URL, Egress: loopback, Token: "t0ken"})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	drv := &dirDriver{SimDriver: NewSimDriver(SimDriverConfig{Log: testLog(t)}), seen: map[string]map[string]string{}}
	t.Cleanup(func() { drv.Close(t.Context()) })
	cfg := testConfig(t, "n-restart", drv)
	cfg.Cache = newCache()
	spec := classifier("keep", 0)
	spec.Runtime, spec.Manifest = "xgboost", man
	e.put(t, "n-restart", 1, spec)
	first, err := New(cfg, e.nc, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	allReady(t, first, "keep")
	first.Stop()
	// A stale directory of a replica that is gone since.
	stale := cfg.Cache.Dir("gone")
	if err := os.MkdirAll(stale, 0o755); err != nil {
		t.Fatal(err)
	}

	cfg.Cache = newCache() // the restarted process's cache
	second := start(t, cfg, e.nc)
	allReady(t, second, "keep")
	if c := second.Counters(); c.ReplicaAdoptions != 1 || c.ReplicaStarts != 0 {
		t.Fatalf("second agent: %+v; want the replica adopted", c)
	}
	if _, err := os.Stat(filepath.Join(cfg.Cache.Dir("keep"), "model.json")); err != nil {
		t.Errorf("adopted replica's model dir: %v", err)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("stale replica dir: %v; want it removed", err)
	}
	if n := st.requests(sum(files["model.json"])); n != 1 {
		t.Errorf("model file fetched %d times; want once", n)
	}
}

// TestReplicaIsNotReadyBeforeItsFilesAreVerified: while a file of the
// version is still downloading the replica is reported starting, with the
// reason, and is not started; once every file is fetched and verified it
// becomes ready and the version is in the cache. A rollout moves weight
// only to a ready candidate (rollout's TestStartingCandidateGetsNoWeight),
// so placing the candidate at weight 0 is its pre-pull (docs/decisions.md,
// "Rollout candidates are pre-pulled by their own replicas").
func TestReplicaIsNotReadyBeforeItsFilesAreVerified(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	st := &store{blobs: map[string][]byte{}, corrupt: map[string]bool{}, asked: map[string]int{}, held: map[string]chan struct{}{}}
	srv := httptest.NewServer(st)
	t.Cleanup(srv.Close)
	weights := bytes.Repeat([]byte("candidate weights "), 1000)
	man := st.version(map[string][]byte{"model.onnx": weights})
	release := make(chan struct{})
	st.mu.Lock()
	st.held[sum(weights)] = release
	st.mu.Unlock()

	c, err := cache.New(cache.Config{Dir: t.TempDir(), URL: srv.URL, Token: "t0ken", LimitBytes: 1 << 20, Egress: loopback})
	if err != nil {
		t.Fatal(err)
	}
	drv := &dirDriver{SimDriver: NewSimDriver(SimDriverConfig{Log: testLog(t)}), seen: map[string]map[string]string{}}
	t.Cleanup(func() { drv.Close(t.Context()) })
	cfg := testConfig(t, "n1", drv)
	cfg.Cache = c
	a := start(t, cfg, e.nc)
	cand := classifier("cand", 0)
	cand.Runtime, cand.Manifest = "onnxruntime", man
	e.put(t, "n1", 1, cand)

	wait.Eventually(t, 10*time.Second, func() bool { return st.requests(sum(weights)) > 0 }, "the file was never asked for")
	rs := replicas(a)["cand"]
	if rs.State != busapi.StateStarting || rs.Reason != prepMsg || rs.Addr != "" {
		t.Errorf("while its file downloads: %+v; want starting, %q, no address", rs, prepMsg)
	}
	if _, started := drv.files("cand"); started {
		t.Error("the replica was started before its files were verified")
	}
	if cs := a.Status().Cache; cs == nil || cs.Versions != 0 {
		t.Errorf("cache while downloading = %+v; want no version whole", cs)
	}
	close(release)
	wait.Eventually(t, 10*time.Second, func() bool { return replicas(a)["cand"].State == busapi.StateReady },
		"replica never ready: %v", wait.Show(func() any { return replicas(a) }))
	if got, _ := drv.files("cand"); got["model.onnx"] != string(weights) {
		t.Error("the replica started without its verified file")
	}
	if cs := a.Status().Cache; cs == nil || cs.Versions != 1 || cs.Misses != 1 {
		t.Errorf("cache once ready = %+v; want the version whole after one miss", cs)
	}
}

// TestVersionTooBigForTheCacheFailsItsReplicaNotTheLiveOne: a version that
// cannot fit beside the one a running replica serves fails its own replica
// with the cache's reason; the running replica keeps serving on its files.
func TestVersionTooBigForTheCacheFailsItsReplicaNotTheLiveOne(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	st := &store{blobs: map[string][]byte{}, corrupt: map[string]bool{}, asked: map[string]int{}}
	srv := httptest.NewServer(st)
	t.Cleanup(srv.Close)
	small := st.version(map[string][]byte{"model.onnx": bytes.Repeat([]byte("s"), 4000)})
	big := st.version(map[string][]byte{"model.onnx": bytes.Repeat([]byte("b"), 8000)})
	c, err := cache.New(cache.Config{Dir: t.TempDir(), URL: srv.URL, Token: "t0ken", LimitBytes: 10_000, Egress: loopback})
	if err != nil {
		t.Fatal(err)
	}
	drv := &dirDriver{SimDriver: NewSimDriver(SimDriverConfig{Log: testLog(t)}), seen: map[string]map[string]string{}}
	t.Cleanup(func() { drv.Close(t.Context()) })
	cfg := testConfig(t, "n1", drv)
	cfg.Cache = c
	a := start(t, cfg, e.nc)
	live := classifier("live", 0)
	live.Runtime, live.Manifest = "onnxruntime", small
	e.put(t, "n1", 1, live)
	wait.Eventually(t, 10*time.Second, func() bool { return replicas(a)["live"].State == busapi.StateReady },
		"live replica never ready: %v", wait.Show(func() any { return replicas(a) }))
	huge := classifier("huge", 1)
	huge.Runtime, huge.Manifest = "onnxruntime", big
	e.put(t, "n1", 2, live, huge)
	wait.Eventually(t, 10*time.Second, func() bool { return replicas(a)["huge"].State == busapi.StateFailed },
		"replica of the version too big never failed: %v", wait.Show(func() any { return replicas(a) }))
	if reason := replicas(a)["huge"].Reason; !strings.Contains(reason, "cache full") || !strings.Contains(reason, "--cache-bytes") {
		t.Errorf("reason = %q; want the cache's limit named", reason)
	}
	if rs := replicas(a)["live"]; rs.State != busapi.StateReady {
		t.Errorf("live replica = %+v; want it still ready", rs)
	}
	if _, started := drv.files("huge"); started {
		t.Error("the replica without its files was started")
	}
	if cs := a.Status().Cache; cs == nil || cs.Evictions != 0 || cs.BytesUsed > cs.BytesLimit {
		t.Errorf("cache = %+v; want nothing evicted and the limit kept", cs)
	}
}

// loopback lets the tests' control plane, on 127.0.0.1, be reached.
var loopback = &egress.Policy{AllowLoopback: true}
