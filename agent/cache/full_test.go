package cache_test

import (
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"modelplane/agent/cache"
)

// TestTooSmallCacheFailsWithoutEvictingLiveVersions: a version that does
// not fit beside the versions replicas hold fails its preparation with
// ErrFull and a reason naming --cache-bytes; the live version keeps every
// file. A version no replica holds is evicted to make room, and once the
// live one is released the new one fits.
func TestTooSmallCacheFailsWithoutEvictingLiveVersions(t *testing.T) {
	t.Parallel()
	p := newPlane(t)
	const n = 2500 // floats: each file is a little over 10,000 bytes
	live := p.version("live", map[string][]byte{"live.safetensors": weights("live", n)})
	old := p.version("old", map[string][]byte{"old.safetensors": weights("old", n)})
	big := p.version("big", map[string][]byte{"big.safetensors": weights("big", 2*n)})
	size := int64(len(weights("live", n)))
	dir := t.TempDir()
	c := newCache(t, p, dir, 5*size/2) // room for two small files, not for the big one beside one
	has := func(tag string, n int) bool { return exists(t, blob(dir, digest(weights(tag, n)))) }
	if _, err := c.Prepare(t.Context(), old); err != nil {
		t.Fatal(err)
	}
	c.Release(old.ID) // cached, held by no replica
	if _, err := c.Prepare(t.Context(), live); err != nil {
		t.Fatal(err)
	}
	_, err := c.Prepare(t.Context(), big)
	if !errors.Is(err, cache.ErrFull) || !strings.Contains(err.Error(), "--cache-bytes") {
		t.Fatalf("Prepare of a version that cannot fit = %v; want ErrFull naming --cache-bytes", err)
	}
	if !has("live", n) {
		t.Error("the live version's file was evicted to make room")
	}
	if _, err := os.Stat(filepath.Join(c.Dir(live.ID), "live.safetensors")); err != nil {
		t.Errorf("the live replica's directory lost its file: %v", err)
	}
	if has("old", n) {
		t.Error("the version no replica holds was kept while a new one had no room")
	}
	if _, err := os.Stat(filepath.Join(dir, "partial", digest(weights("big", 2*n)))); err == nil {
		t.Error("a partial file of the version that did not fit was written")
	}
	if st := c.Stats(); st.BytesUsed > st.BytesLimit {
		t.Errorf("cache uses %d bytes of %d", st.BytesUsed, st.BytesLimit)
	}
	c.Release(live.ID)
	got, err := c.Prepare(t.Context(), big)
	if err != nil {
		t.Fatalf("Prepare once the live version was released: %v", err)
	}
	checkDir(t, got.Dir, map[string][]byte{"big.safetensors": weights("big", 2*n)}, false)
}

// TestFullDiskFailsWithTheReason: a write the kernel refuses for want of
// space (the partial file is /dev/full, which answers every write with
// ENOSPC) fails the preparation with ErrFull at once, saying the disk is
// full, instead of retrying.
func TestFullDiskFailsWithTheReason(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skip("no /dev/full:", err)
	}
	p := newPlane(t)
	files := map[string][]byte{"model.safetensors": weights("full", 1024)}
	spec := p.version("v1", files)
	d := digest(files["model.safetensors"])
	dir := t.TempDir()
	c := newCache(t, p, dir, 0)
	if err := os.Symlink("/dev/full", filepath.Join(dir, "partial", d)); err != nil {
		t.Fatal(err)
	}
	_, err := c.Prepare(t.Context(), spec)
	if !errors.Is(err, cache.ErrFull) || !strings.Contains(err.Error(), "disk under the cache is full") || !strings.Contains(err.Error(), "model.safetensors") {
		t.Fatalf("Prepare on a full disk = %v; want ErrFull saying the disk is full and naming the file", err)
	}
	if n := len(p.requests(d)); n != 1 {
		t.Errorf("file requested %d times; want once, a full disk is not retried", n)
	}
	if exists(t, c.Dir(spec.ID)) || exists(t, blob(dir, d)) {
		t.Error("a model directory or blob exists after the failed write")
	}
}

// TestTruncatedArtifactIsNeverServed: a control plane whose copy of a
// file is short (a complete response, with its length, of too few bytes)
// has the file fetched once more and then fails the preparation with
// ErrDigest; nothing is linked.
func TestTruncatedArtifactIsNeverServed(t *testing.T) {
	t.Parallel()
	p := newPlane(t)
	files := map[string][]byte{"model.safetensors": weights("short", 1024)}
	spec := p.version("v1", files)
	d := digest(files["model.safetensors"])
	short := files["model.safetensors"][:len(files["model.safetensors"])-100]
	p.setHook(func(w http.ResponseWriter, _ *http.Request, dg string, _ int) http.ResponseWriter {
		if dg != d {
			return w
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(short)))
		_, _ = w.Write(short)
		return nil
	})
	dir := t.TempDir()
	c := newCache(t, p, dir, 0)
	_, err := c.Prepare(t.Context(), spec)
	if !errors.Is(err, cache.ErrDigest) || !strings.Contains(err.Error(), "model.safetensors") {
		t.Fatalf("Prepare of a truncated file = %v; want ErrDigest naming the file", err)
	}
	if n := len(p.requests(d)); n != 2 {
		t.Errorf("file fetched %d times; want 2", n)
	}
	if exists(t, c.Dir(spec.ID)) || exists(t, blob(dir, d)) {
		t.Error("a model directory or blob of the truncated file exists")
	}
}
