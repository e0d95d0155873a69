package cli

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"slices"
)

// defaultChunkBytes is how push splits files unless told otherwise: small
// enough that an interrupted upload loses little, large enough that a
// chunk's request costs nothing beside its bytes.
const defaultChunkBytes = 8 << 20

// pushFile is one file of a push with its chunks.
type pushFile struct {
	path   string // slash path in the manifest
	local  string
	sha256 string
	size   int64
	chunks []pushChunk
}

// pushChunk is a piece of a file, addressed by its sha256.
type pushChunk struct {
	sha256    string
	off, size int64
	local     string
}

// scanDir lists the regular files under dir by slash path, leaving out
// skip (an absolute path), and hashes each whole and in chunks of
// chunkSize bytes in one read. Links and other special files are refused:
// the server would refuse them too.
func scanDir(dir, skip string, chunkSize int64) ([]pushFile, error) {
	if chunkSize <= 0 {
		return nil, usagef("--chunk-size must be more than 0")
	}
	var out []pushFile
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		if !d.Type().IsRegular() {
			return fmt.Errorf("%s: not a regular file (links are not uploaded)", p)
		}
		if abs, err := filepath.Abs(p); err == nil && abs == skip {
			return nil
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		f, err := hashFile(p, chunkSize)
		if err != nil {
			return err
		}
		f.path = filepath.ToSlash(rel)
		out = append(out, f)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s holds no files", dir)
	}
	slices.SortFunc(out, func(a, b pushFile) int { return cmpString(a.path, b.path) })
	return out, nil
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// hashFile reads p once for its sha256 and its chunks'.
func hashFile(p string, chunkSize int64) (pushFile, error) {
	f, err := os.Open(p)
	if err != nil {
		return pushFile{}, err
	}
	defer f.Close()
	out := pushFile{local: p}
	whole := sha256.New()
	buf := make([]byte, min(chunkSize, 1<<20))
	for {
		part := sha256.New()
		n, err := io.CopyBuffer(io.MultiWriter(whole, part), io.LimitReader(f, chunkSize), buf)
		if err != nil {
			return pushFile{}, err
		}
		if n == 0 && len(out.chunks) > 0 {
			break
		}
		out.chunks = append(out.chunks, pushChunk{sha256: hex.EncodeToString(part.Sum(nil)), off: out.size, size: n, local: p})
		out.size += n
		if n < chunkSize {
			break
		}
	}
	out.sha256 = hex.EncodeToString(whole.Sum(nil))
	return out, nil
}

// uploadSession is the part of an upload session push reads.
type uploadSession struct {
	ID        string            `json:"id"`
	Version   string            `json:"version"`
	Manifest  map[string]string `json:"manifest"`
	Completed bool              `json:"completed"`
	Chunks    []struct {
		SHA256 string `json:"sha256"`
		Size   int64  `json:"size"`
	} `json:"chunks"`
	MaxChunkBytes int64 `json:"max_chunk_bytes"`
}

// uploadsDir is where push remembers the sessions of uploads not yet
// completed, so that running the same push again resumes.
func (a *app) uploadsDir() string {
	d, err := a.configDir()
	if err != nil {
		return ""
	}
	return filepath.Join(d, "uploads")
}

// push registers a version through an upload session: it finds the
// session a previous run of the same push left (or starts one), sends the
// chunks the session lacks, and completes it. Each step can be repeated:
// starting and completing carry an Idempotency-Key and are retried with
// it, a chunk is stored once however often it is sent, and completing a
// completed session answers its version.
func (c *client) push(ctx context.Context, stateDir, model, dir string, meta map[string]any, files []pushFile) ([]byte, error) {
	man := map[string]string{}
	parts := map[string][]string{}
	for _, f := range files {
		man[f.path] = f.sha256
		for _, ch := range f.chunks {
			parts[f.path] = append(parts[f.path], ch.sha256)
		}
	}
	state := c.sessionFile(stateDir, model, meta, man)
	sess, err := c.resumeSession(ctx, state, fmt.Sprint(meta["name"]), man)
	if err != nil {
		return nil, err
	}
	if sess == nil {
		b, err := c.call(ctx, http.MethodPost, "/models/"+esc(model)+"/uploads", nil, map[string]any{"metadata": meta, "manifest": man})
		if err != nil {
			return nil, err
		}
		sess = &uploadSession{}
		if err := json.Unmarshal(b, sess); err != nil {
			return nil, err
		}
		if state != "" {
			_ = os.MkdirAll(filepath.Dir(state), 0o700)
			_ = os.WriteFile(state, []byte(sess.ID+"\n"), 0o600)
		}
	}
	if sess.MaxChunkBytes > 0 {
		for _, f := range files {
			for _, ch := range f.chunks {
				if ch.size > sess.MaxChunkBytes {
					return nil, usagef("--chunk-size: the server takes chunks of at most %d bytes", sess.MaxChunkBytes)
				}
			}
		}
	}
	held := map[string]bool{}
	for _, ch := range sess.Chunks {
		held[ch.SHA256] = true
	}
	// Each distinct chunk once: files that share content share chunks.
	var todo []pushChunk
	var total, stored int64
	seen := map[string]bool{}
	for _, f := range files {
		for _, ch := range f.chunks {
			if seen[ch.sha256] {
				continue
			}
			seen[ch.sha256] = true
			total += ch.size
			if held[ch.sha256] {
				stored += ch.size
				continue
			}
			todo = append(todo, ch)
		}
	}
	prog := newProgress(c.warn, total)
	if !sess.Completed {
		if stored > 0 {
			fmt.Fprintf(c.warn, "resuming upload %s: %s of %s already stored\n", sess.ID, bytesText(stored), bytesText(total))
		}
		prog.resume(stored)
		for _, ch := range todo {
			if err := c.putChunk(ctx, sess.ID, ch, prog); err != nil {
				return nil, fmt.Errorf("%w (run the same push again to resume)", err)
			}
		}
		prog.finish()
	}
	b, err := c.call(ctx, http.MethodPost, "/uploads/"+esc(sess.ID)+"/complete", nil, map[string]any{"files": parts})
	if err != nil {
		return nil, err
	}
	if state != "" {
		_ = os.Remove(state)
	}
	return b, nil
}

// sessionFile names the file that remembers the session of this push:
// the same server, model, version name and files make the same name.
func (c *client) sessionFile(dir, model string, meta map[string]any, man map[string]string) string {
	if dir == "" {
		return ""
	}
	h := sha256.New()
	mb, _ := json.Marshal(man) // sorted keys
	fmt.Fprintf(h, "%s\x00%s\x00%v\x00%s", c.t.api, model, meta["name"], mb)
	return filepath.Join(dir, hex.EncodeToString(h.Sum(nil))[:32])
}

// resumeSession reads the session a previous run left, when it is still
// there and for the same files; nil when there is none to resume.
func (c *client) resumeSession(ctx context.Context, state, name string, man map[string]string) (*uploadSession, error) {
	if state == "" {
		return nil, nil
	}
	b, err := os.ReadFile(state)
	if err != nil {
		return nil, nil
	}
	id := string(b[:max(0, len(b)-1)])
	raw, err := c.call(ctx, http.MethodGet, "/uploads/"+esc(id), nil, nil)
	var p *Problem
	if errors.As(err, &p) && p.Status == http.StatusNotFound {
		_ = os.Remove(state) // expired
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var s uploadSession
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, err
	}
	if s.Version != name || !sameManifest(s.Manifest, man) {
		return nil, nil
	}
	return &s, nil
}

func sameManifest(a, b map[string]string) bool {
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

// putChunk sends one chunk, again after a failure of the transport or
// the server (a chunk is stored once however often it arrives).
func (c *client) putChunk(ctx context.Context, id string, ch pushChunk, prog *progress) error {
	var err error
	for attempt := 1; attempt <= uploadAttempts; attempt++ {
		if err = c.putChunkOnce(ctx, id, ch, prog); err == nil {
			return nil
		}
		if !retryable(err) || ctx.Err() != nil || attempt == uploadAttempts {
			break
		}
		fmt.Fprintf(c.warn, "modelplane: chunk %s…: attempt %d failed (%v); sending it again\n", ch.sha256[:12], attempt, err)
		if berr := backoff(ctx, attempt); berr != nil {
			return berr
		}
	}
	return err
}

func (c *client) putChunkOnce(ctx context.Context, id string, ch pushChunk, prog *progress) error {
	f, err := os.Open(ch.local)
	if err != nil {
		return err
	}
	defer f.Close()
	counted := &countingReader{r: io.NewSectionReader(f, ch.off, ch.size), p: prog}
	req, err := c.request(ctx, http.MethodPut, "/uploads/"+esc(id)+"/chunks/"+ch.sha256, nil, counted)
	if err != nil {
		return err
	}
	req.ContentLength = ch.size
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := c.send(req)
	if err != nil {
		prog.add(-int(counted.n))
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return nil
}
