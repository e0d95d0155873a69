package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"modelplane/internal/freeport"
)

// The throughput phases are driven by wrk, a load generator in C, from
// the cores the proxies do not run on: the bench's own net/http client
// used a whole core to keep a proxy on the other at a quarter of its
// core (issue 31), so its rps ratios measured the client, not the proxy.
// The instant replica behind the proxies is nginx answering `return 200`
// with the same JSON the Go replica gives (backendConfig), for the same
// reason: a Go replica beside wrk took the core wrk needs.

// errWrkMissing is runWrk's answer where wrk is not installed.
var errWrkMissing = errors.New("wrk is not installed (scripts/bench-proxies.sh installs it)")

// wrkScript is the Lua script every wrk run uses: the predict body and
// headers the Go client sends, and one line at the end with the counts
// and exact percentiles (microseconds) that parseWrk reads.
func wrkScript(key string) string {
	return `wrk.method = "POST"
wrk.body = '` + predictIn + `'
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer ` + key + `"
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("mp-bench %d %d %d %d %d %d\n", summary.requests, summary.duration,
    e.status, e.connect + e.read + e.write + e.timeout, latency:percentile(50), latency:percentile(99)))
end
`
}

// wrkRun is one wrk run's figures.
type wrkRun struct {
	requests, statusErrors, socketErrors int
	seconds                              float64
	p50, p99                             time.Duration
	// cpu is wrk's own CPU time (user and system).
	cpu time.Duration
}

// rps is the run's answered requests a second, errors left out.
func (w wrkRun) rps() float64 {
	if w.seconds == 0 {
		return 0
	}
	return float64(w.requests-w.statusErrors) / w.seconds
}

// parseWrk reads the line wrkScript's done function prints.
func parseWrk(out string) (wrkRun, error) {
	for line := range strings.Lines(out) {
		f := strings.Fields(line)
		if len(f) != 7 || f[0] != "mp-bench" {
			continue
		}
		var n [6]int64
		for i := range n {
			v, err := strconv.ParseInt(f[i+1], 10, 64)
			if err != nil {
				return wrkRun{}, fmt.Errorf("wrk said %q: %w", strings.TrimSpace(line), err)
			}
			n[i] = v
		}
		return wrkRun{requests: int(n[0]), seconds: float64(n[1]) / 1e6, statusErrors: int(n[2]), socketErrors: int(n[3]),
			p50: time.Duration(n[4]) * time.Microsecond, p99: time.Duration(n[5]) * time.Microsecond}, nil
	}
	return wrkRun{}, fmt.Errorf("wrk printed no result: %q", strings.TrimSpace(out))
}

// wrkLoad runs wrk with one thread and conns connections against u for d
// (whole seconds, wrk's unit), pinned to the load generator's cores when
// pin is set.
func (b *gatewayBench) wrkLoad(ctx context.Context, u string, conns int, d time.Duration) (wrkRun, error) {
	if b.wrk == "" {
		return wrkRun{}, errWrkMissing
	}
	argv := pinned(b.pin, otherCores(), b.wrk, "-t1", "-c"+strconv.Itoa(conns), "-d"+strconv.Itoa(int(d.Seconds()))+"s",
		"--timeout", "10s", "-s", b.wrkScript, u)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return wrkRun{}, fmt.Errorf("wrk: %w: %s", err, strings.TrimSpace(out.String()))
	}
	r, err := parseWrk(out.String())
	if err != nil {
		return r, err
	}
	r.cpu = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	return r, nil
}

// otherCores are the cores the load generator and replicas run on: all
// but core 0, which the proxies get.
func otherCores() string {
	return "1-" + strconv.Itoa(max(1, runtime.NumCPU()-1))
}

// setUpWrk finds wrk and writes its script, or notes in the result that
// the throughput phases fall back to the Go client.
func (b *gatewayBench) setUpWrk() error {
	b.res.LoadGenerator = "go"
	bin, err := exec.LookPath("wrk")
	if err != nil {
		b.res.Skipped["wrk"] = errWrkMissing.Error() + "; the 64-connection phases use the Go client, which cannot saturate a proxy's core"
		fmt.Fprintln(os.Stderr, "bench gateway:", b.res.Skipped["wrk"])
		return nil
	}
	script := filepath.Join(b.s.dir, "predict.lua")
	if err := os.WriteFile(script, []byte(wrkScript(b.key)), 0o600); err != nil {
		return err
	}
	b.wrk, b.wrkScript = bin, script
	b.res.LoadGenerator = "wrk"
	b.res.Versions["wrk"] = wrkVersion(bin)
	return nil
}

// wrkVersion is what wrk -v says its version is ("debian/4.1.0-3+b2").
func wrkVersion(bin string) string {
	out, _ := exec.Command(bin, "-v").CombinedOutput()
	f := strings.Fields(string(out))
	if len(f) > 1 {
		return f[1]
	}
	return ""
}

// backendConfig is the nginx config of the instant backend: addrs each
// answer POST /predict with predictOut at once, one worker, no log.
func backendConfig(pdir string, addrs []string) string {
	var listen strings.Builder
	for _, a := range addrs {
		listen.WriteString("    listen " + a + ";\n")
	}
	return nginxConf(pdir, 1, nil, `  server {
`+listen.String()+`    location = /predict {
      default_type application/json;
      return 200 '`+predictOut+`';
    }
  }
`)
}

// startBackend starts nginx as the instant backend, listening on two free
// ports (a replica each) and pinned to the load generator's cores, and
// returns it and the addresses.
func startBackend(dir string, pin bool) (*proc, []string, error) {
	bin, err := proxyBin("nginx")
	if err != nil {
		return nil, nil, err
	}
	var addrs []string
	for range 2 {
		port, err := freeport.Get()
		if err != nil {
			return nil, nil, err
		}
		addrs = append(addrs, fmt.Sprintf("127.0.0.1:%d", port))
	}
	pdir := filepath.Join(dir, "backend")
	if err := os.MkdirAll(filepath.Join(pdir, "tmp"), 0o755); err != nil {
		return nil, nil, err
	}
	conf := filepath.Join(pdir, "backend.conf")
	if err := os.WriteFile(conf, []byte(backendConfig(pdir, addrs)), 0o644); err != nil {
		return nil, nil, err
	}
	p, err := launch(pinned(pin, otherCores(), nginxArgv(bin, pdir, conf)...), pdir, addrs[1], 1)
	if err != nil {
		return nil, nil, err
	}
	return p, addrs, nil
}
