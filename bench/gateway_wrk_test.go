package bench

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// parseWrk reads the line the bench's Lua script prints, and says so
// when wrk printed none or a garbled one.
func TestParseWrkReadsTheScriptsLine(t *testing.T) {
	t.Parallel()
	got, err := parseWrk("Running 2s test @ http://x\n  1 threads and 64 connections\nmp-bench 20000 2000500 3 1 180 2400\n")
	if err != nil {
		t.Fatal(err)
	}
	want := wrkRun{requests: 20000, seconds: 2.0005, statusErrors: 3, socketErrors: 1, p50: 180 * time.Microsecond, p99: 2400 * time.Microsecond}
	if got != want {
		t.Errorf("parseWrk = %+v, want %+v", got, want)
	}
	if rps := got.rps(); rps < 9995.9 || rps > 9996.1 {
		t.Errorf("rps = %f, want (20000-3)/2.0005", rps)
	}
	for _, bad := range []string{"", "unable to connect to 127.0.0.1:1 Connection refused\n", "mp-bench 1 2 3 4 x 6\n"} {
		if _, err := parseWrk(bad); err == nil {
			t.Errorf("parseWrk(%q) gave no error", bad)
		}
	}
}

// wrk, run as the bench runs it, sends the predict body with the key and
// JSON content type on kept-alive connections, and counts an answer
// other than 2xx as an error.
func TestWrkSendsTheBenchRequest(t *testing.T) {
	t.Parallel()
	bin, err := exec.LookPath("wrk")
	if err != nil {
		t.Skip("wrk is not installed (scripts/bench-proxies.sh installs it; the bench falls back to its Go client)")
	}
	var good, bad, conns atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.Method != http.MethodPost || string(body) != predictIn || r.Header.Get("Authorization") != "Bearer k1" ||
			r.Header.Get("Content-Type") != "application/json" {
			bad.Add(1)
			http.Error(w, "not the bench's request", http.StatusBadRequest)
			return
		}
		good.Add(1)
		_, _ = io.WriteString(w, predictOut)
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	s, err := newScratch("mp-bench-wrk-")
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	b := &gatewayBench{s: s, key: "k1", res: GatewayResult{Skipped: map[string]string{}, Versions: map[string]string{}}}
	if err := b.setUpWrk(); err != nil {
		t.Fatal(err)
	}
	if b.wrk != bin || b.res.LoadGenerator != "wrk" || b.res.Versions["wrk"] == "" {
		t.Fatalf("setUpWrk: wrk %q, load generator %q, version %q", b.wrk, b.res.LoadGenerator, b.res.Versions["wrk"])
	}
	r, err := b.wrkLoad(context.Background(), srv.URL+"/predict", 4, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if r.requests == 0 || r.statusErrors != 0 || r.socketErrors != 0 || bad.Load() != 0 {
		t.Errorf("wrk: %+v; the server saw %d bad requests", r, bad.Load())
	}
	if int64(r.requests) > good.Load() {
		t.Errorf("wrk counted %d requests, the server answered %d", r.requests, good.Load())
	}
	if n := conns.Load(); n < 4 || n > 8 || int(n) >= r.requests {
		t.Errorf("wrk opened %d connections for 4 clients and %d requests, want them kept alive", n, r.requests)
	}
	if r.p99 < r.p50 || r.p50 <= 0 {
		t.Errorf("percentiles p50 %v p99 %v", r.p50, r.p99)
	}

	b.key = "wrong"
	if err := b.setUpWrk(); err != nil {
		t.Fatal(err)
	}
	r, err = b.wrkLoad(context.Background(), srv.URL+"/predict", 1, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if r.statusErrors == 0 || r.statusErrors != r.requests || r.rps() != 0 {
		t.Errorf("with a wrong key: %+v, want every request counted as an error and no rps", r)
	}
}

// The instant backend answers a prediction on both of its addresses as
// the Go replica does, keeping the connection alive.
func TestBackendAnswersLikeTheReplica(t *testing.T) {
	t.Parallel()
	if _, err := proxyBin("nginx"); err != nil {
		t.Skip("nginx is not installed (scripts/bench-proxies.sh installs it; the bench falls back to the Go replica)")
	}
	s, err := newScratch("mp-bench-backend-")
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	p, addrs, err := startBackend(s.dir, false)
	if err != nil {
		t.Fatal(err)
	}
	defer p.stop()
	if len(addrs) != 2 {
		t.Fatalf("backend addresses %v, want two replicas", addrs)
	}
	var conns atomic.Int64
	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		conns.Add(1)
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}}}
	for _, a := range append(addrs, addrs...) {
		resp, err := client.Post("http://"+a+"/predict", "application/json", strings.NewReader(predictIn))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || string(body) != predictOut || resp.Header.Get("Content-Type") != "application/json" {
			t.Errorf("%s: %d %q %q, want 200 %q application/json", a, resp.StatusCode, body, resp.Header.Get("Content-Type"), predictOut)
		}
	}
	if n := conns.Load(); n != 2 {
		t.Errorf("%d connections for four requests to two addresses, want them kept alive", n)
	}
}

// Without wrk the bench says so, on its standard error and in its JSON,
// and the 64-connection phases fall back to the Go client.
func TestWithoutWrkTheBenchFallsBackAndSaysSo(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	s, err := newScratch("mp-bench-nowrk-")
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	b := &gatewayBench{s: s, key: "k1", res: GatewayResult{Skipped: map[string]string{}, Versions: map[string]string{}}}
	if err := b.setUpWrk(); err != nil {
		t.Fatal(err)
	}
	if b.wrk != "" || b.res.LoadGenerator != "go" || !strings.Contains(b.res.Skipped["wrk"], "wrk is not installed") {
		t.Errorf("without wrk: wrk %q, load generator %q, skipped %q; want the Go client, named", b.wrk, b.res.LoadGenerator, b.res.Skipped["wrk"])
	}
	if _, err := b.wrkLoad(context.Background(), "http://127.0.0.1:1/predict", 1, time.Second); !errors.Is(err, errWrkMissing) {
		t.Errorf("wrkLoad without wrk: %v, want errWrkMissing", err)
	}
}
