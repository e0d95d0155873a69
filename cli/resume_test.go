package cli_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"modelplane/cli"
)

// chunkCounter is a transport that records the chunks a push sends (the
// sha256 each PUT names, when the server stored it) and, when stopAfter
// is set, cancels the push right after that many were stored: a Ctrl-C
// half-way through an upload.
type chunkCounter struct {
	mu        sync.Mutex
	stored    []string
	stopAfter int
	cancel    context.CancelFunc
}

func (c *chunkCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err != nil || r.Method != http.MethodPut || !strings.Contains(r.URL.Path, "/chunks/") || resp.StatusCode != http.StatusCreated {
		return resp, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stored = append(c.stored, path.Base(r.URL.Path))
	if c.stopAfter > 0 && len(c.stored) == c.stopAfter {
		c.cancel()
	}
	return resp, err
}

// bigSafetensors is a valid safetensors file of n float32 values.
func bigSafetensors(n int) []byte {
	header := fmt.Appendf(nil, `{"w":{"dtype":"F32","shape":[%d],"data_offsets":[0,%d]}}`, n, 4*n)
	var b bytes.Buffer
	_ = binary.Write(&b, binary.LittleEndian, uint64(len(header)))
	b.Write(header)
	for i := range n {
		_ = binary.Write(&b, binary.LittleEndian, float32(i%1000)/7)
	}
	return b.Bytes()
}

// TestPushInterruptedThenResumed cuts a push off after six of its chunks
// are stored, then runs the same push again: it resumes the upload
// session, sends only the chunks the session lacks (none of the six
// again), and registers one version whose manifest is the files' sha256,
// as the download verifies.
func TestPushInterruptedThenResumed(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	risk := s.keys["risk-admin"]
	s.run(t, risk, "models", "create", "big", "--task", "classification").ok(t, "models create")
	dir := t.TempDir()
	files := map[string][]byte{"model.safetensors": bigSafetensors(64 << 10), "config.json": []byte(`{"labels": ["ok", "fraud"]}`)}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	const chunk = 16 << 10 // the 256 KiB model is 17 chunks
	argv := []string{"versions", "push", "big", dir, "--name", "v1", "--runtime", "onnxruntime", "--chunk-size", fmt.Sprint(chunk), "-o", "json"}
	env := map[string]string{"MP_API": s.url + "/api/v1", "MP_API_KEY": risk}
	push := func(ctx context.Context, rt http.RoundTripper) result {
		var out, errb bytes.Buffer
		code := cli.Run(ctx, argv, cli.Env{Stdout: &out, Stderr: &errb, Getenv: func(k string) string { return env[k] },
			ConfigDir: s.cfgDir, HTTP: &http.Client{Transport: rt}})
		return result{stdout: out.String(), stderr: errb.String(), code: code}
	}

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	first := &chunkCounter{stopAfter: 6, cancel: cancel}
	r := push(ctx, first)
	if r.code == 0 || !strings.Contains(r.stderr, "run the same push again") {
		t.Fatalf("interrupted push: exit %d\n%s%s; want a failure that says how to resume", r.code, r.stdout, r.stderr)
	}
	if len(first.stored) != 6 {
		t.Fatalf("first push stored %d chunks; want 6", len(first.stored))
	}
	list := jsonOf[struct{ Items []map[string]any }](t, s.run(t, risk, "versions", "list", "big", "-o", "json").ok(t, "versions list"))
	if len(list.Items) != 0 {
		t.Fatalf("versions after the interrupted push: %v; want none", list.Items)
	}

	second := &chunkCounter{}
	r = push(t.Context(), second)
	v := jsonOf[map[string]any](t, r.ok(t, "resumed push"))
	if !strings.Contains(r.stderr, "resuming upload") {
		t.Errorf("stderr %q; want it to say it resumed", r.stderr)
	}
	for _, d := range second.stored {
		for _, e := range first.stored {
			if d == e {
				t.Errorf("chunk %s sent again after it was stored", d)
			}
		}
	}
	want := len(files["model.safetensors"])/chunk + 2 // the model's chunks and the config's one
	if got := len(first.stored) + len(second.stored); got != want {
		t.Errorf("chunks sent: %d then %d; want %d in all", len(first.stored), len(second.stored), want)
	}
	man, _ := v["manifest"].(map[string]any)
	for name, b := range files {
		sum := sha256.Sum256(b)
		if man[name] != hex.EncodeToString(sum[:]) {
			t.Errorf("manifest %s = %v; want %x", name, man[name], sum)
		}
	}
	list = jsonOf[struct{ Items []map[string]any }](t, s.run(t, risk, "versions", "list", "big", "-o", "json").ok(t, "versions list"))
	if len(list.Items) != 1 {
		t.Errorf("versions %v; want exactly one", list.Items)
	}
	out := t.TempDir()
	s.run(t, risk, "versions", "download", "big", "v1", "--dir", out).ok(t, "versions download")
	for name, b := range files {
		if got, err := os.ReadFile(filepath.Join(out, name)); err != nil || !bytes.Equal(got, b) {
			t.Errorf("downloaded %s differs (%v)", name, err)
		}
	}
	// Nothing is left to resume: the same push again starts afresh and
	// answers that v1 exists.
	s.run(t, risk, argv[:len(argv)-2]...).want(t, "the same push after it completed", 4, "409")
}
