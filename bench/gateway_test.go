package bench

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"modelplane/internal/wait"
)

// The raw proxy relays the bench's requests, several over one kept-alive
// connection, to the replica and its answers back unchanged.
func TestRawProxyRelaysKeptAliveRequests(t *testing.T) {
	t.Parallel()
	rep := httptest.NewServer(replica())
	t.Cleanup(rep.Close)
	s, err := newScratch("mp-bench-raw-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.close)
	addr, err := startRawProxy(s, strings.TrimPrefix(rep.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	br := bufio.NewReader(c)
	for i := range 3 {
		req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/predict", strings.NewReader(predictIn))
		if err := req.Write(c); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		resp, err := http.ReadResponse(br, req)
		if err != nil {
			t.Fatalf("answer %d: %v", i, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || string(body) != predictOut {
			t.Fatalf("answer %d: %d %q, want 200 %q", i, resp.StatusCode, body, predictOut)
		}
	}
}

// A body the raw proxy cannot frame (chunked) ends the connection rather
// than being relayed wrong.
func TestRawProxyRefusesChunkedBodies(t *testing.T) {
	t.Parallel()
	rep := httptest.NewServer(replica())
	t.Cleanup(rep.Close)
	s, err := newScratch("mp-bench-raw-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.close)
	addr, err := startRawProxy(s, strings.TrimPrefix(rep.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := io.WriteString(c, "POST /predict HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	if b, err := io.ReadAll(c); len(b) != 0 {
		t.Fatalf("got %q (%v), want the connection closed without an answer", b, err)
	}
}

// nginx and HAProxy get as many workers as the gateway has cores, keep
// their replica connections alive and log no requests, as the gateway.
func TestProxyConfigIsTheGatewaysPeer(t *testing.T) {
	t.Parallel()
	nginx, _ := proxyConfig("nginx", "nginx", "/p", "127.0.0.1:1", "127.0.0.1:2", 3)
	for _, want := range []string{"worker_processes 3;", "access_log off;", "keepalive 1024;", `proxy_set_header Connection "";`} {
		if !strings.Contains(nginx, want) {
			t.Errorf("nginx config lacks %q:\n%s", want, nginx)
		}
	}
	haproxy, _ := proxyConfig("haproxy", "haproxy", "/p", "127.0.0.1:1", "127.0.0.1:2", 3)
	for _, want := range []string{"nbthread 3", "option http-keep-alive", "http-reuse always"} {
		if !strings.Contains(haproxy, want) {
			t.Errorf("haproxy config lacks %q:\n%s", want, haproxy)
		}
	}
	if strings.Contains(haproxy, "\n  log ") || strings.Contains(haproxy, "option httplog") {
		t.Errorf("haproxy config logs requests:\n%s", haproxy)
	}
}

func TestVersionInReadsEachProxysWords(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ out, want string }{
		{"nginx version: nginx/1.22.1\n", "1.22.1"},
		{"HAProxy version 2.6.12-1+deb12u4 2026/10/17 - https://haproxy.org/\nStatus: long-term", "2.6.12-1+deb12u4"},
		{"v2.6.2 h1:oc8+5GiRkZgG9Hn9ck6ic8BE6ZBAYKVCh1wWqhoSw7E=\n", "v2.6.2"},
		{"", ""},
	} {
		if got := versionIn(tc.out); got != tc.want {
			t.Errorf("versionIn(%q) = %q, want %q", tc.out, got, tc.want)
		}
	}
}

// treeCPU counts a process's children: nginx's workers do its work.
func TestTreeCPUCountsChildren(t *testing.T) {
	t.Parallel()
	cmd := exec.Command("sh", "-c", "while :; do :; done")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	self := os.Getpid()
	wait.Eventually(t, 30*time.Second, func() bool { return pidCPU(cmd.Process.Pid) > 0 }, "the child never used CPU")
	// Read in this order, each reading is at most what the tree's holds.
	own, child := pidCPU(self), pidCPU(cmd.Process.Pid)
	if got := treeCPU(self) - own; got < child {
		t.Errorf("tree CPU beyond this process %v, want at least the child's %v", got, child)
	}
	if treeCPU(0) != 0 {
		t.Error("pid 0 has CPU time")
	}
}

// TestRunTimeReadsTheScheduler: a live process's run time is read from
// its threads' schedstat in nanoseconds, never less than the 10 ms ticks
// of /proc/<pid>/stat say less a tick, and it does not go back.
func TestRunTimeReadsTheScheduler(t *testing.T) {
	t.Parallel()
	pid := os.Getpid()
	first := runTime(pid)
	ticks := pidCPU(pid)
	if first <= 0 || first < ticks-2*clockTick {
		t.Errorf("runTime = %v with stat's %v; want a positive figure at least stat's less its rounding", first, ticks)
	}
	if again := runTime(pid); again < first {
		t.Errorf("runTime went back from %v to %v", first, again)
	}
}
