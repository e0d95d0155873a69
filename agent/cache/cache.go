package cache

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/coder/quartz"

	"modelplane/artifact"
	"modelplane/busapi"
	"modelplane/egress"
	"modelplane/serveapi"
)

// Watermarks of the cache, as shares of Config.LimitBytes: above High it
// evicts until it is at or under Low, so that one new version does not
// make it evict on every start.
const (
	High = 0.80
	Low  = 0.70
)

// maxStalls is how many attempts in a row a download may make without
// receiving a byte before it fails; an attempt that made progress (a
// connection cut mid-body) is resumed at once.
const maxStalls = 3

// ErrDigest is wrapped by the error of a preparation that failed because a
// file's content did not match its sha256 twice: what the control plane
// serves is not what the version registered.
var ErrDigest = errors.New("sha256 mismatch")

// ErrFull is wrapped by the error of a preparation that found no room for
// a file: the versions replicas hold leave too little of the cache's limit
// (Config.LimitBytes), or the disk under it is full. The cache never evicts
// a version in use to make room; the replica fails with the reason and is
// retried after the agent's backoff, when a version may have been released.
var ErrFull = errors.New("cache full")

// Config configures a Cache.
type Config struct {
	// Dir holds the cache; it must survive agent restarts so that partial
	// downloads resume and cached versions start without a download.
	Dir string
	// LimitBytes is the size the cache keeps itself under (see High and
	// Low); 0 means no limit.
	LimitBytes int64
	// URL is the control plane's base URL, as in http://cp:8080.
	URL string
	// Token is the node agents' credential, sent as a bearer token.
	Token string
	// TokenFunc, when set, is asked for the token at each request instead
	// of Token: an enrolled node's artifact token changes when it rotates.
	TokenFunc func() string
	// Client makes the downloads; nil is a client of the egress allow-list
	// (Egress) without a total timeout (a large file takes long), whose
	// connections time out when idle.
	Client *http.Client
	// Egress is the allow-list of the default client. URL's host is always
	// on it; nil allows only that host. Either way the client dials no
	// loopback (unless AllowLoopback), link-local or metadata address, uses
	// no proxy, and follows a redirect only where the policy allows.
	Egress *egress.Policy
	// Clock times downloads and verification and orders versions by use.
	Clock quartz.Clock
	Log   *slog.Logger
}

// Prepared is a replica's model directory, ready for a runtime.
type Prepared struct {
	// Dir holds every file of the version at its manifest path, and the
	// runtime settings (serveapi.ConfigFile) when the spec has any.
	Dir string
	// Download is the time spent fetching, Verify the time spent hashing.
	Download time.Duration
	Verify   time.Duration
	// Fetched is the number of files downloaded; 0 is a cache hit.
	// Hashed is the number of files read to check their digest: the
	// downloaded ones and cached ones whose stamp changed.
	Fetched int
	Hashed  int
}

// stamp is what a verified file looked like on disk.
type stamp struct {
	Size    int64  `json:"size"`
	Ino     uint64 `json:"ino"`
	Dev     uint64 `json:"dev"`
	CtimeNS int64  `json:"ctime_ns"`
	MtimeNS int64  `json:"mtime_ns"`
}

// version is one cached version, by the digest of its manifest.
type version struct {
	// Files are the digests the version needs: its manifest's, then its
	// files', sorted, each once.
	Files []string `json:"files"`
	// Used orders versions by their last preparation (a sequence number,
	// which a clock step cannot reorder); UsedAt is that time.
	Used     uint64    `json:"used"`
	UsedAt   time.Time `json:"used_at"`
	Complete bool      `json:"complete"`
}

// index is the cache's state file.
type index struct {
	Seq      uint64              `json:"seq"`
	Versions map[string]*version `json:"versions"`
	Stamps   map[string]stamp    `json:"stamps"`
}

// Cache is a node's artifact cache. Build it with New; it is safe for
// concurrent use, and preparations of the same file wait for each other.
type Cache struct {
	cfg    Config
	client *http.Client
	log    *slog.Logger

	mu       sync.Mutex
	idx      index
	blobs    map[string]int64         // digest → size of the stored file
	partials map[string]int64         // digest → size of its partial download
	pins     map[string]string        // replica id → manifest digest
	busy     map[string]chan struct{} // digest → closed when its fetch ends
	hits     uint64
	misses   uint64
	evicted  uint64
}

// New opens the cache in cfg.Dir, creating it, and forgets what no recorded
// version needs (files of an interrupted first preparation that the index
// never listed).
func New(cfg Config) (*Cache, error) {
	if cfg.Dir == "" {
		return nil, errors.New("cache: a directory is required")
	}
	if cfg.URL == "" {
		return nil, errors.New("cache: the control plane URL is required")
	}
	if cfg.LimitBytes < 0 {
		return nil, fmt.Errorf("cache: limit %d: want 0 (none) or a positive size", cfg.LimitBytes)
	}
	if cfg.Clock == nil {
		cfg.Clock = quartz.NewReal()
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	cfg.URL = strings.TrimRight(cfg.URL, "/")
	client := cfg.Client
	if client == nil {
		var err error
		if client, err = egressClient(cfg.URL, cfg.Egress); err != nil {
			return nil, err
		}
	}
	c := &Cache{cfg: cfg, client: client, log: cfg.Log, blobs: map[string]int64{}, partials: map[string]int64{},
		pins: map[string]string{}, busy: map[string]chan struct{}{}}
	// A runtime runs as another user: it traverses the cache and the
	// replicas directory (0711: it cannot list them) to its own replica
	// directory, which the process driver makes its user's alone (0500),
	// and reaches the blobs only through that directory's hard links. The
	// blobs' own directory is the agent's (0700), so no runtime reads a
	// blob of a version it does not serve. Modes are set on directories an
	// older agent made 0755 too.
	for _, d := range []struct {
		path string
		mode os.FileMode
	}{{cfg.Dir, 0o711}, {c.sub("blobs"), 0o700}, {c.sub("blobs", "sha256"), 0o700}, {c.sub("replicas"), 0o711}} {
		if err := os.MkdirAll(d.path, d.mode); err != nil {
			return nil, fmt.Errorf("cache dir: %w", err)
		}
		if err := os.Chmod(d.path, d.mode); err != nil {
			return nil, fmt.Errorf("cache dir: %w", err)
		}
	}
	for _, d := range []string{c.sub("partial"), c.sub("tmp")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("cache dir: %w", err)
		}
	}
	if err := c.load(); err != nil {
		c.log.Error("cache index unreadable; starting empty", slog.String("error", err.Error()))
		c.idx = index{}
	}
	if c.idx.Versions == nil {
		c.idx.Versions = map[string]*version{}
	}
	if c.idx.Stamps == nil {
		c.idx.Stamps = map[string]stamp{}
	}
	if err := c.scan(); err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.evictLocked()
	return c, c.saveLocked()
}

func (c *Cache) sub(elem ...string) string {
	return filepath.Join(append([]string{c.cfg.Dir}, elem...)...)
}

func (c *Cache) blobPath(d string) string    { return c.sub("blobs", "sha256", d[:2], d) }
func (c *Cache) partialPath(d string) string { return c.sub("partial", d) }

func (c *Cache) load() error {
	data, err := os.ReadFile(c.sub("index.json"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	return json.Unmarshal(data, &c.idx)
}

// scan learns what is on disk and removes what no recorded version lists
// and the leftovers of temporary files.
func (c *Cache) scan() error {
	needed := c.neededLocked()
	root := c.sub("blobs", "sha256")
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		name := d.Name()
		if !artifact.IsDigest(name) || !needed[name] || filepath.Base(filepath.Dir(p)) != name[:2] {
			return removeFile(p)
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		c.blobs[name] = fi.Size()
		return nil
	})
	if err != nil {
		return fmt.Errorf("scan cache: %w", err)
	}
	entries, err := os.ReadDir(c.sub("partial"))
	if err != nil {
		return fmt.Errorf("scan cache: %w", err)
	}
	for _, e := range entries {
		p := c.sub("partial", e.Name())
		if _, stored := c.blobs[e.Name()]; !needed[e.Name()] || stored {
			if err := removeFile(p); err != nil {
				return err
			}
			continue
		}
		if fi, err := e.Info(); err == nil {
			c.partials[e.Name()] = fi.Size()
		}
	}
	for d := range c.idx.Stamps {
		if _, ok := c.blobs[d]; !ok {
			delete(c.idx.Stamps, d)
		}
	}
	for _, v := range c.idx.Versions {
		for _, d := range v.Files {
			if _, ok := c.blobs[d]; !ok {
				v.Complete = false
			}
		}
	}
	entries, err = os.ReadDir(c.sub("tmp"))
	if err != nil {
		return fmt.Errorf("scan cache: %w", err)
	}
	for _, e := range entries {
		if err := os.RemoveAll(c.sub("tmp", e.Name())); err != nil {
			return fmt.Errorf("scan cache: %w", err)
		}
	}
	return nil
}

// Prune removes the directories of replicas that hold no pin: those a
// previous run prepared for replicas that are gone. The agent calls it once
// it has pinned the replicas it adopted; their directories stay, since a
// runtime restarted in place reads them again.
func (c *Cache) Prune() error {
	c.mu.Lock()
	keep := map[string]bool{}
	for id := range c.pins {
		keep[dirName(id)] = true
	}
	c.mu.Unlock()
	entries, err := os.ReadDir(c.sub("replicas"))
	if err != nil {
		return fmt.Errorf("prune replica dirs: %w", err)
	}
	var errs []error
	for _, e := range entries {
		if !keep[e.Name()] {
			errs = append(errs, os.RemoveAll(c.sub("replicas", e.Name())))
		}
	}
	return errors.Join(errs...)
}

func removeFile(p string) error {
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove %s: %w", p, err)
	}
	return nil
}

// neededLocked is every digest some recorded version lists.
func (c *Cache) neededLocked() map[string]bool {
	out := map[string]bool{}
	for m, v := range c.idx.Versions {
		out[m] = true
		for _, d := range v.Files {
			out[d] = true
		}
	}
	return out
}

// Pin marks the version a running replica serves as in use, without
// preparing anything: the agent pins the replicas it adopts after a restart,
// whose directories the previous run prepared, so that no eviction takes
// their files. Prepare pins too; Release ends either.
func (c *Cache) Pin(replicaID, manifest string) {
	if manifest == "" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pins[replicaID] = manifest
	if _, ok := c.idx.Versions[manifest]; !ok {
		c.idx.Versions[manifest] = &version{Files: []string{manifest}}
	}
}

// Release ends a replica's hold on its version and removes its directory;
// the version stays cached until evicted.
func (c *Cache) Release(replicaID string) {
	c.mu.Lock()
	var files []string
	if v := c.idx.Versions[c.pins[replicaID]]; v != nil {
		files = slices.Clone(v.Files)
	}
	delete(c.pins, replicaID)
	c.mu.Unlock()
	err := c.keepingStamps(files, func() error { return os.RemoveAll(c.sub("replicas", dirName(replicaID))) })
	if err != nil {
		c.log.Warn("replica directory not removed", slog.String("replica", replicaID), slog.String("error", err.Error()))
	}
}

// Dir is where the replica's directory is (or would be) kept.
func (c *Cache) Dir(replicaID string) string { return c.sub("replicas", dirName(replicaID)) }

// dirName is a replica id as a directory name: the id when it is a safe
// one, else its hash.
func dirName(id string) string {
	ok := id != "" && id != "." && id != ".." && len(id) <= 200
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			ok = false
		}
	}
	if ok {
		return id
	}
	sum := sha256.Sum256([]byte(id))
	return "id-" + hex.EncodeToString(sum[:12])
}

// Prepare makes the replica's model directory: it fetches the version's
// manifest (spec.Manifest) and every file not cached, verifies each, links
// them into the replica's own directory and writes the runtime settings
// beside them. The version is pinned from the start until Release. A spec
// without a manifest has nothing to fetch: the result is empty. A file that
// fails its digest twice fails the preparation with an error wrapping
// ErrDigest; nothing unverified is ever linked.
func (c *Cache) Prepare(ctx context.Context, spec busapi.ReplicaSpec) (Prepared, error) {
	var p Prepared
	if spec.Manifest == "" {
		return p, nil
	}
	if !artifact.IsDigest(spec.Manifest) {
		return p, fmt.Errorf("manifest digest %q is not a sha256", spec.Manifest)
	}
	c.Pin(spec.ID, spec.Manifest)
	c.mu.Lock()
	c.touchLocked(spec.Manifest)
	err := c.saveLocked()
	c.mu.Unlock()
	if err != nil {
		return p, err
	}
	if err := c.ensure(ctx, spec.Manifest, "the manifest", &p); err != nil {
		return p, err
	}
	raw, err := os.ReadFile(c.blobPath(spec.Manifest))
	if err != nil {
		return p, fmt.Errorf("read manifest: %w", err)
	}
	man, err := artifact.ParseManifest(raw)
	if err != nil {
		return p, fmt.Errorf("manifest %s: %w", spec.Manifest, err)
	}
	if _, clash := man[serveapi.ConfigFile]; clash && len(spec.Settings) > 0 {
		return p, fmt.Errorf("the version has a file named %s, which is where the agent writes the runtime's settings", serveapi.ConfigFile)
	}
	files := []string{spec.Manifest}
	for _, path := range man.Paths() {
		if d := man[path]; !slices.Contains(files, d) {
			files = append(files, d)
		}
	}
	slices.Sort(files[1:])
	c.mu.Lock()
	c.idx.Versions[spec.Manifest].Files = files
	err = c.saveLocked()
	c.mu.Unlock()
	if err != nil {
		return p, err
	}
	done := map[string]bool{}
	for _, path := range man.Paths() {
		d := man[path]
		if done[d] {
			continue
		}
		done[d] = true
		if err := c.ensure(ctx, d, path, &p); err != nil {
			return p, err
		}
	}
	err = c.keepingStamps(files, func() error {
		var err error
		p.Dir, err = c.link(spec, man)
		return err
	})
	if err != nil {
		return p, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.idx.Versions[spec.Manifest].Complete = true
	c.touchLocked(spec.Manifest)
	if p.Fetched == 0 {
		c.hits++
	} else {
		c.misses++
	}
	c.evictLocked()
	return p, c.saveLocked()
}

func (c *Cache) touchLocked(manifest string) {
	v := c.idx.Versions[manifest]
	if v == nil {
		v = &version{Files: []string{manifest}}
		c.idx.Versions[manifest] = v
	}
	c.idx.Seq++
	v.Used, v.UsedAt = c.idx.Seq, c.cfg.Clock.Now().UTC()
}

// lockDigest makes fetches of one digest wait for each other.
func (c *Cache) lockDigest(ctx context.Context, d string) (func(), error) {
	for {
		c.mu.Lock()
		ch, busy := c.busy[d]
		if !busy {
			ch = make(chan struct{})
			c.busy[d] = ch
			c.mu.Unlock()
			return func() {
				c.mu.Lock()
				delete(c.busy, d)
				c.mu.Unlock()
				close(ch)
			}, nil
		}
		c.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// ensure makes the blob of digest d present and verified. A cached blob
// whose stamp changed since it was verified is hashed again; one that fails
// is deleted and fetched, which counts as the first of the two failures a
// file may have.
func (c *Cache) ensure(ctx context.Context, d, name string, p *Prepared) error {
	unlock, err := c.lockDigest(ctx, d)
	if err != nil {
		return err
	}
	defer unlock()
	blob := c.blobPath(d)
	failures := 0
	if fi, err := os.Stat(blob); err == nil {
		if c.trusted(d, fi) {
			return nil
		}
		t := c.cfg.Clock.Now()
		got, err := hashFile(blob)
		p.Verify += c.cfg.Clock.Since(t)
		p.Hashed++
		if err != nil {
			return fmt.Errorf("verify cached %s: %w", name, err)
		}
		if got == d {
			return c.stampBlob(d, blob)
		}
		c.log.Warn("cached file does not match its digest; fetching it again", slog.String("file", name), slog.String("digest", d), slog.String("got", got))
		if err := c.dropBlob(d); err != nil {
			return err
		}
		failures++
	}
	for {
		t := c.cfg.Clock.Now()
		err := c.download(ctx, d)
		p.Download += c.cfg.Clock.Since(t)
		if err != nil {
			return fmt.Errorf("fetch %s (%s): %w", name, d, err)
		}
		p.Fetched++
		part := c.partialPath(d)
		t = c.cfg.Clock.Now()
		got, err := hashFile(part)
		p.Verify += c.cfg.Clock.Since(t)
		p.Hashed++
		if err != nil {
			return fmt.Errorf("verify %s: %w", name, err)
		}
		if got == d {
			return c.install(d, part)
		}
		if err := removeFile(part); err != nil {
			return err
		}
		c.mu.Lock()
		delete(c.partials, d)
		c.mu.Unlock()
		failures++
		c.log.Warn("downloaded file does not match its digest", slog.String("file", name), slog.String("digest", d), slog.String("got", got), slog.Int("failures", failures))
		if failures >= 2 {
			return fmt.Errorf("%s: content hashes to %s, want %s, a second time: %w", name, got, d, ErrDigest)
		}
	}
}

func (c *Cache) trusted(d string, fi os.FileInfo) bool {
	st, ok := stampOf(fi)
	if !ok {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	was, ok := c.idx.Stamps[d]
	return ok && was == st
}

// keepingStamps runs op, which links or unlinks blobs of digests into or
// out of replica directories, and records the stamps of those blobs that
// were trusted before it again: a link count change moves a file's change
// time, and without this every cached start would hash its files again.
func (c *Cache) keepingStamps(digests []string, op func() error) error {
	var trusted []string
	for _, d := range digests {
		if fi, err := os.Stat(c.blobPath(d)); err == nil && c.trusted(d, fi) {
			trusted = append(trusted, d)
		}
	}
	err := op()
	for _, d := range trusted {
		if serr := c.stampBlob(d, c.blobPath(d)); err == nil {
			err = serr
		}
	}
	return err
}

func (c *Cache) stampBlob(d, blob string) error {
	fi, err := os.Stat(blob)
	if err != nil {
		return fmt.Errorf("stat %s: %w", blob, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.blobs[d] = fi.Size()
	if st, ok := stampOf(fi); ok {
		c.idx.Stamps[d] = st
	}
	return c.saveLocked()
}

// install moves a verified download into place, read-only.
func (c *Cache) install(d, part string) error {
	blob := c.blobPath(d)
	f, err := os.Open(part)
	if err != nil {
		return fmt.Errorf("install %s: %w", d, err)
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(part, 0o444)
	}
	if err == nil {
		err = os.MkdirAll(filepath.Dir(blob), 0o700)
	}
	if err == nil {
		err = os.Rename(part, blob)
	}
	if err != nil {
		return fmt.Errorf("install %s: %w", d, err)
	}
	c.mu.Lock()
	delete(c.partials, d)
	c.mu.Unlock()
	return c.stampBlob(d, blob)
}

func (c *Cache) dropBlob(d string) error {
	if err := removeFile(c.blobPath(d)); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.blobs, d)
	delete(c.idx.Stamps, d)
	return c.saveLocked()
}

func hashFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// authorize adds the agent's credential to a request to the control plane.
func (c *Cache) authorize(r *http.Request) {
	token := c.cfg.Token
	if c.cfg.TokenFunc != nil {
		token = c.cfg.TokenFunc()
	}
	r.Header.Set("Authorization", "Bearer "+token)
}

// download fetches digest d into its partial file, resuming what an earlier
// attempt (or run) left there with a Range request. It returns once the
// server has sent everything; the caller verifies.
func (c *Cache) download(ctx context.Context, d string) error {
	part := c.partialPath(d)
	stalls := 0
	var last error
	for stalls < maxStalls {
		var off int64
		if fi, err := os.Stat(part); err == nil {
			off = fi.Size()
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.cfg.URL+"/internal/artifacts/"+d, nil)
		if err != nil {
			return err
		}
		c.authorize(req)
		if off > 0 {
			req.Header.Set("Range", "bytes="+strconv.FormatInt(off, 10)+"-")
			req.Header.Set("If-Range", `"`+d+`"`)
		}
		resp, err := c.client.Do(req)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			stalls++
			last = err
			continue
		}
		flags := os.O_WRONLY | os.O_CREATE | os.O_APPEND
		switch resp.StatusCode {
		case http.StatusOK:
			flags = os.O_WRONLY | os.O_CREATE | os.O_TRUNC
		case http.StatusPartialContent:
			if !strings.HasPrefix(resp.Header.Get("Content-Range"), "bytes "+strconv.FormatInt(off, 10)+"-") {
				resp.Body.Close()
				_ = removeFile(part) // a range we did not ask for: start over
				stalls++
				last = fmt.Errorf("control plane sent range %q for bytes %d-", resp.Header.Get("Content-Range"), off)
				continue
			}
		case http.StatusRequestedRangeNotSatisfiable:
			resp.Body.Close()
			return nil // the partial file holds it all (or more): the hash decides
		case http.StatusUnauthorized, http.StatusForbidden:
			resp.Body.Close()
			return fmt.Errorf("the control plane refused the agent's credentials (%s)", resp.Status)
		case http.StatusNotFound:
			resp.Body.Close()
			return fmt.Errorf("the control plane has no artifact with this digest (%s)", resp.Status)
		default:
			resp.Body.Close()
			stalls++
			last = fmt.Errorf("the control plane answered %s", resp.Status)
			continue
		}
		if err := c.makeRoom(d, off, resp); err != nil {
			resp.Body.Close()
			return err
		}
		n, err := c.write(part, flags, resp.Body)
		resp.Body.Close()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
			// Retrying cannot help until something else frees the disk;
			// the partial file stays for a resume.
			return fmt.Errorf("%w: the disk under the cache is full (%v)", ErrFull, err)
		}
		if n > 0 {
			stalls = 0
		} else {
			stalls++
		}
		last = err
		c.log.Info("download interrupted; resuming", slog.String("digest", d), slog.Int64("offset", off+n), slog.String("error", err.Error()))
	}
	return fmt.Errorf("download failed %d times in a row without progress: %w", maxStalls, last)
}

// makeRoom checks, before a body is written, that it fits under the
// cache's limit: the bytes it adds (the whole file on a 200, the rest on a
// 206) beside what the cache holds. When it does not, it evicts versions no
// replica holds, least recently used first, until it does; when even that
// is not enough, the preparation fails with ErrFull and nothing in use is
// touched. A response without a length is let through (the watermark
// eviction after the preparation bounds it).
func (c *Cache) makeRoom(d string, off int64, resp *http.Response) error {
	limit := c.cfg.LimitBytes
	if limit <= 0 || resp.ContentLength < 0 {
		return nil
	}
	adds := resp.ContentLength
	c.mu.Lock()
	defer c.mu.Unlock()
	if resp.StatusCode == http.StatusOK {
		adds -= c.partials[d] // truncated and written again
	}
	if c.usedLocked()+adds <= limit {
		return nil
	}
	c.evictDownToLocked(limit - adds)
	if used := c.usedLocked(); used+adds > limit {
		return fmt.Errorf("%w: a file of %d bytes does not fit: the versions in use hold %d of the cache's %d bytes (--cache-bytes)",
			ErrFull, off+resp.ContentLength, used, limit)
	}
	return nil
}

// write copies body into the partial file and records its size, which a
// heartbeat reports as cache use.
func (c *Cache) write(part string, flags int, body io.Reader) (int64, error) {
	f, err := os.OpenFile(part, flags, 0o600)
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(f, body)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if fi, serr := os.Stat(part); serr == nil {
		c.mu.Lock()
		c.partials[filepath.Base(part)] = fi.Size()
		c.mu.Unlock()
	}
	return n, err
}

// link builds the replica's directory in a temporary place and renames it
// into place, so a runtime never sees a half-built one.
func (c *Cache) link(spec busapi.ReplicaSpec, man artifact.Manifest) (string, error) {
	final := c.Dir(spec.ID)
	tmp, err := os.MkdirTemp(c.sub("tmp"), "replica-")
	if err != nil {
		return "", fmt.Errorf("replica dir: %w", err)
	}
	defer os.RemoveAll(tmp)
	if err := os.Chmod(tmp, 0o755); err != nil {
		return "", fmt.Errorf("replica dir: %w", err)
	}
	for _, path := range man.Paths() {
		dst := filepath.Join(tmp, filepath.FromSlash(path))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return "", fmt.Errorf("replica dir: %w", err)
		}
		if err := os.Link(c.blobPath(man[path]), dst); err != nil {
			return "", fmt.Errorf("replica dir: link %s: %w", path, err)
		}
	}
	if len(spec.Settings) > 0 {
		var buf bytes.Buffer
		if err := json.Indent(&buf, spec.Settings, "", "  "); err != nil {
			return "", fmt.Errorf("runtime settings are not JSON: %w", err)
		}
		if err := os.WriteFile(filepath.Join(tmp, serveapi.ConfigFile), buf.Bytes(), 0o444); err != nil {
			return "", fmt.Errorf("write runtime settings: %w", err)
		}
	}
	if err := os.RemoveAll(final); err != nil {
		return "", fmt.Errorf("replica dir: %w", err)
	}
	if err := os.Rename(tmp, final); err != nil {
		return "", fmt.Errorf("replica dir: %w", err)
	}
	return final, nil
}

// usedLocked is what the cache takes on disk.
func (c *Cache) usedLocked() int64 {
	var n int64
	for _, s := range c.blobs {
		n += s
	}
	for _, s := range c.partials {
		n += s
	}
	return n
}

// evictLocked removes least recently used versions while the cache is above
// its high watermark, until it is at or under the low one. A version a
// replica holds is never evicted, and a file is removed only when no
// version still kept lists it.
func (c *Cache) evictLocked() {
	limit := c.cfg.LimitBytes
	if limit <= 0 || float64(c.usedLocked()) <= High*float64(limit) {
		return
	}
	if used := c.evictDownToLocked(int64(Low * float64(limit))); float64(used) > High*float64(limit) {
		c.log.Warn("cache stays above its high watermark: the versions in use need more", slog.Int64("used_bytes", used), slog.Int64("limit_bytes", limit))
	}
}

// evictDownToLocked evicts versions no replica holds, least recently used
// first, until at most target bytes are used or none is left to evict, and
// returns the bytes used.
func (c *Cache) evictDownToLocked(target int64) int64 {
	used := c.usedLocked()
	pinned := map[string]bool{}
	for _, m := range c.pins {
		pinned[m] = true
	}
	var order []string
	for m := range c.idx.Versions {
		if !pinned[m] {
			order = append(order, m)
		}
	}
	slices.SortFunc(order, func(a, b string) int {
		return cmp.Or(cmp.Compare(c.idx.Versions[a].Used, c.idx.Versions[b].Used), cmp.Compare(a, b))
	})
	for _, m := range order {
		if used <= target {
			break
		}
		v := c.idx.Versions[m]
		delete(c.idx.Versions, m)
		keep := c.neededLocked()
		var freed int64
		for _, d := range v.Files {
			if keep[d] {
				continue
			}
			if err := removeFile(c.blobPath(d)); err != nil {
				c.log.Warn("cache file not evicted", slog.String("error", err.Error()))
				continue
			}
			_ = removeFile(c.partialPath(d))
			freed += c.blobs[d] + c.partials[d]
			delete(c.blobs, d)
			delete(c.partials, d)
			delete(c.idx.Stamps, d)
		}
		used -= freed
		c.evicted++
		c.log.Info("evicted version from the cache", slog.String("manifest", m), slog.Int64("freed_bytes", freed), slog.Int64("used_bytes", used))
	}
	return used
}

// saveLocked writes the index atomically.
func (c *Cache) saveLocked() error {
	data, err := json.Marshal(c.idx)
	if err != nil {
		return err
	}
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	tmp := c.sub("tmp", "index-"+hex.EncodeToString(b))
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return fmt.Errorf("write cache index: %w", err)
	}
	if err := os.Rename(tmp, c.sub("index.json")); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("write cache index: %w", err)
	}
	return nil
}

// Stats is the cache as a heartbeat reports it.
func (c *Cache) Stats() busapi.CacheStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := busapi.CacheStatus{BytesUsed: c.usedLocked(), BytesLimit: c.cfg.LimitBytes, Hits: c.hits, Misses: c.misses, Evictions: c.evicted}
	for _, v := range c.idx.Versions {
		if v.Complete {
			st.Versions++
		}
	}
	return st
}

// egressClient is the downloads' default client: the policy p with the
// control plane's host added.
func egressClient(base string, p *egress.Policy) (*http.Client, error) {
	u, err := url.Parse(base)
	if err != nil || u.Hostname() == "" {
		return nil, fmt.Errorf("cache: control plane URL %q has no host", base)
	}
	pol := &egress.Policy{Hosts: []string{u.Hostname()}}
	if p != nil {
		pol.Hosts = append(pol.Hosts, p.Hosts...)
		pol.AllowLoopback = p.AllowLoopback
		pol.RootCAs = p.RootCAs
	}
	c := pol.Client(0)
	c.Transport.(*http.Transport).ResponseHeaderTimeout = 30 * time.Second
	return c, nil
}
