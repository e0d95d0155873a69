package process

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/coder/quartz"

	"modelplane/busapi"
)

// readAs asks the runtime of r whether it can read path.
func readAs(t *testing.T, r *replica, path string) (bool, string) {
	t.Helper()
	resp, err := http.Get("http://" + r.Addr() + "/read?path=" + url.QueryEscape(path))
	if err != nil {
		t.Fatalf("GET /read: %v", err)
	}
	defer resp.Body.Close()
	var got struct {
		Readable bool   `json:"readable"`
		Content  string `json:"content"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
		t.Fatal(err)
	}
	return got.Readable, got.Content
}

// TestSecurityRuntimesKeptApart: every runtime ran as one user, cache
// directories were 0755 and blobs 0444, and the token was in each
// runtime's environment, so any runtime read every team's weights and a
// sibling's MP_REPLICA_TOKEN from /proc/<pid>/environ. Two replicas
// started as the cache lays them out (a 0711 replicas directory, each
// model directory of hard links to the blobs) run as users of their own;
// the token comes on a pipe read once. Replica b cannot read a's model
// file, a's environment or a's token descriptor; a reads its own file and
// got its token.
func TestSecurityRuntimesKeptApart(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("runtimes get users of their own only when the agent runs as root (setuid); as another user they share the agent's")
	}
	t.Parallel()
	cacheDir := t.TempDir() // 0700: the agent's, like the cache's blobs
	replicas := filepath.Join(cacheDir, "replicas")
	blobs := filepath.Join(cacheDir, "blobs")
	for _, d := range []string{replicas, blobs} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{filepath.Dir(cacheDir), cacheDir, replicas} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	dirOf := func(id string) string { return filepath.Join(replicas, id) }
	for _, id := range []string{"r-a", "r-b"} {
		blob := filepath.Join(blobs, id+"-weights")
		if err := os.WriteFile(blob, []byte("weights of "+id), 0o444); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(dirOf(id), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Link(blob, filepath.Join(dirOf(id), "model.bin")); err != nil {
			t.Fatal(err)
		}
	}
	d := newDriver(t, t.TempDir(), quartz.NewMock(t), func(c *Config) {
		e := fake()
		e.ChecksToken = true // so the runtime, not a guard, is given the token
		c.Catalog["fake"] = e
		c.Resolve = func(_ context.Context, s busapi.ReplicaSpec, _ string) (Launch, error) {
			return Launch{Runtime: "fake", ModelDir: dirOf(s.ID), Private: true}, nil
		}
	})
	sa, sb := spec("r-a"), spec("r-b")
	sa.Token, sb.Token = "token-of-a-"+strings.Repeat("x", 20), "token-of-b-"+strings.Repeat("y", 20)
	ra, rb := start(t, d, sa, ""), start(t, d, sb, "")
	waitReady(t, ra)
	waitReady(t, rb)

	ea, eb := envOf(t, ra), envOf(t, rb)
	if ea.UID == 0 || eb.UID == 0 || ea.UID == eb.UID {
		t.Fatalf("runtimes run as uids %d and %d; want two of their own, not root", ea.UID, eb.UID)
	}
	var tok struct {
		Token string `json:"token"`
	}
	resp, err := http.Get("http://" + ra.Addr() + "/env")
	if err != nil {
		t.Fatal(err)
	}
	_ = json.NewDecoder(resp.Body).Decode(&tok)
	resp.Body.Close()
	if tok.Token != sa.Token {
		t.Errorf("a's runtime got token %q, want its own", tok.Token)
	}
	for _, kv := range ea.Environ {
		if strings.Contains(kv, sa.Token) {
			t.Errorf("a's environment holds its token: %s", kv)
		}
	}
	if ok, content := readAs(t, ra, filepath.Join(dirOf("r-a"), "model.bin")); !ok || content != "weights of r-a" {
		t.Errorf("a cannot read its own model file (%v %q)", ok, content)
	}
	fdA, _ := strconv.Atoi(func() string {
		for _, kv := range ea.Environ {
			if v, ok := strings.CutPrefix(kv, busapi.ReplicaTokenFDEnv+"="); ok {
				return v
			}
		}
		return "3"
	}())
	for _, path := range []string{
		filepath.Join(dirOf("r-a"), "model.bin"),
		filepath.Join(blobs, "r-a-weights"),
		"/proc/" + strconv.Itoa(ea.PID) + "/environ",
		"/proc/" + strconv.Itoa(ea.PID) + "/fd/" + strconv.Itoa(fdA),
		"/proc/" + strconv.Itoa(ea.PID) + "/mem",
	} {
		if ok, content := readAs(t, rb, path); ok {
			t.Errorf("b reads a's %s: %q", path, content)
		}
	}
}
