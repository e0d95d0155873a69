package process

import (
	"log/slog"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/coder/quartz"

	"modelplane/internal/wait"
)

// TestSecurityRuntimeMemoryLimit: memory_mb only steered placement, so a
// replica whose requests allocate (XGBoost's rows × classes) could take
// the node's memory and get other teams' replicas OOM-killed. A real
// runtime with a 1024 MiB limit is asked to hold 4 GiB: it is stopped at
// its limit (its cgroup's memory.max at 1024 MiB, or RLIMIT_AS of 1024 MiB
// and the address-space headroom where the agent cannot make a cgroup),
// and the replica fails with "memory limit 1024 MiB exceeded". A sibling
// without the request keeps serving.
func TestSecurityRuntimeMemoryLimit(t *testing.T) {
	t.Parallel()
	var logs syncBuffer
	d := newDriver(t, t.TempDir(), quartz.NewMock(t), func(c *Config) {
		c.Log = slog.New(slog.NewTextHandler(&logs, nil))
	})
	t.Logf("memory limits: cgroup %q (%s)", d.mem.parent, d.mem.why)
	hog, sibling := spec("r-hog"), spec("r-sibling")
	hog.MemoryMB, sibling.MemoryMB = 1024, 1024
	rh := start(t, d, hog, "")
	rs := start(t, d, sibling, "")
	waitReady(t, rh)
	waitReady(t, rs)
	resp, err := http.Post("http://"+rh.Addr()+"/alloc?mb=4096", "text/plain", nil)
	if err == nil {
		resp.Body.Close()
		t.Logf("/alloc answered %s", resp.Status)
	}
	wait.Eventually(t, long, func() bool {
		return strings.Contains(logs.String(), "memory limit 1024 MiB exceeded")
	}, "no failure naming the memory limit; log:\n%s\nruntime log:\n%s", wait.Show(func() any { return logs.String() }),
		wait.Show(func() any { b, _ := os.ReadFile(d.logPath("r-hog")); return string(b) }))
	if code, err := predict(rs.Addr()); err != nil || code != http.StatusOK {
		t.Errorf("sibling's /predict = %d, %v; want 200", code, err)
	}
}
