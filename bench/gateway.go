package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"modelplane/bus"
	"modelplane/busapi"
	"modelplane/gateway"
	"modelplane/internal/freeport"
)

// GatewayResult is what `modelplane bench gateway` prints: the
// gateway's overhead against a replica that answers at once, reached
// directly, through the gateway with every feature on, through a bare
// httputil.ReverseProxy and through nginx, HAProxy and Caddy as plain
// proxies (DESIGN.md section 13).
type GatewayResult struct {
	Name string `json:"name"`
	// AddedP99MsC1 is, at concurrency 1, the gateway's p99 latency minus
	// the direct path's p99. The c1 phase sends one request to every path
	// in turn (rotating the order), so all paths are measured over the same
	// moments; AddedP99PairedMsC1 is the p99 of the per-turn differences
	// gateway minus direct, a stricter reading.
	AddedP99MsC1       float64 `json:"added_p99_ms_c1"`
	AddedP99PairedMsC1 float64 `json:"added_p99_paired_ms_c1"`
	// RPSC64 is the gateway's throughput with 64 concurrent clients.
	RPSC64 float64 `json:"rps_c64"`
	// The ratios are the medians over the rounds of the gateway's rps over
	// each proxy's in the same round (the paths take turns, one at a time,
	// each round starting further along); RPSRatioRounds holds every
	// round's ratio. Null where the proxy is not installed.
	RatioReverseProxy float64  `json:"rps_ratio_vs_reverseproxy"`
	RatioCaddy        *float64 `json:"rps_ratio_vs_caddy"`
	RatioNginx        *float64 `json:"rps_ratio_vs_nginx"`
	RatioHAProxy      *float64 `json:"rps_ratio_vs_haproxy"`
	// RatioNginxLua is against the peer on the same work: nginx
	// authenticating, validating, limiting, counting and sampling in Lua
	// as the gateway does (gateway_peer.go); NginxLuaVsNginx is the
	// peer's rps over plain nginx's, the median over the rounds: what
	// that work costs nginx.
	RatioNginxLua   *float64             `json:"rps_ratio_vs_nginx_lua"`
	NginxLuaVsNginx *float64             `json:"nginx_lua_rps_vs_nginx"`
	RPSRatioRounds  map[string][]float64 `json:"rps_ratio_rounds"`
	// The same gateway tracing every request (100 % sampling, OTLP/HTTP
	// batches to a local sink that discards them) against the untraced
	// one, in a phase of their own: in each of tracingSlices slices a
	// round, both are driven at once, 32 clients each on the same core,
	// so that every moment of a shared machine (a neighbour's burst, the
	// load generator held off its core) falls on both alike; taking turns
	// instead left a pair's halves a slice apart, and single slices
	// differed fiftyfold. TracingRPSRatio is the median over the slices of
	// the traced rps over the untraced rps, TracingP99RatioC64 the median
	// of the traced p99 over the untraced p99 (the observability targets:
	// at least 0.97 and at most 1.1).
	TracingRPSRatio    float64 `json:"tracing_rps_ratio"`
	TracingP99RatioC64 float64 `json:"tracing_p99_ratio_c64"`
	// TracingCPURatio is, over the same slices, the traced gateway's CPU
	// time per request over the untraced one's: what tracing costs, read
	// from the processes' own CPU time (the scheduler's nanoseconds per
	// thread). TracingCPUUsPerRequest is each one's CPU time per request
	// (off, on) over the same slices.
	TracingCPURatio        float64    `json:"tracing_cpu_ratio_c64"`
	TracingCPUUsPerRequest [2]float64 `json:"tracing_cpu_us_per_request_off_on"`
	// TracingSlices is each slice's ratios, in the order they ran.
	TracingSlices []TracingSlice `json:"tracing_slices"`
	// The gateway against nginx and HAProxy driven at once, as the
	// tracing phase drives its two gateways (in each of tracingSlices
	// slices a round, 32 clients each, all on the same core): CPU time
	// per request of the proxy over the gateway's over the same moments,
	// and each one's (proxy, gateway). A change of a few percent to the
	// gateway, which the rounds' rps and CPU ratios cannot resolve on a
	// shared machine (the same build moved them by a fifth from run to
	// run), shows here. Null where the proxy is not installed.
	CPURatioNginxAtOnce           *float64   `json:"cpu_ratio_vs_nginx_at_once"`
	CPUUsPerRequestNginxAtOnce    [2]float64 `json:"cpu_us_per_request_nginx_gateway_at_once"`
	CPURatioHAProxyAtOnce         *float64   `json:"cpu_ratio_vs_haproxy_at_once"`
	CPUUsPerRequestHAProxyAtOnce  [2]float64 `json:"cpu_us_per_request_haproxy_gateway_at_once"`
	CPURatioNginxLuaAtOnce        *float64   `json:"cpu_ratio_vs_nginx_lua_at_once"`
	CPUUsPerRequestNginxLuaAtOnce [2]float64 `json:"cpu_us_per_request_nginx_lua_gateway_at_once"`
	// SSEAddedTTFTP99Ms is the gateway's p99 time to first event minus
	// the direct path's, with SSEStreams streams open at once (each of
	// SSEEvents events SSEEventGapMs apart). A stall is a stream that ended
	// before its last event or waited SSEStallMs or more between two.
	SSEAddedTTFTP99Ms  float64 `json:"sse_added_ttft_p99_ms"`
	SSEStreams         int     `json:"sse_streams"`
	SSEStalls          int     `json:"sse_stalls"`
	SSEErrors          int     `json:"sse_errors"`
	SSECompleted       int     `json:"sse_completed"`
	SSEDirectTTFTP99Ms float64 `json:"sse_direct_ttft_p99_ms"`
	SSEGatewayTTFTP99  float64 `json:"sse_gateway_ttft_p99_ms"`
	SSEMaxGapMs        float64 `json:"sse_max_gap_ms"`
	// The same streams through the bare reverse proxy: the floor a
	// net/http proxy reaches on this machine.
	SSEReverseProxyTTFTP99Ms      float64 `json:"sse_reverseproxy_ttft_p99_ms"`
	SSEReverseProxyAddedTTFTP99Ms float64 `json:"sse_reverseproxy_added_ttft_p99_ms"`
	SSEReverseProxyStalls         int     `json:"sse_reverseproxy_stalls"`
	SSEEvents                     int     `json:"sse_events"`
	SSEEventGapMs                 float64 `json:"sse_event_gap_ms"`
	SSEStallMs                    float64 `json:"sse_stall_ms"`
	// CPURatioNginx and CPURatioHAProxy are nginx's and HAProxy's CPU
	// time per request at 64 clients over the gateway's (above 1: the
	// gateway spends less), CPURatioReverseProxy the bare ReverseProxy's;
	// null where the proxy is not installed.
	CPURatioReverseProxy *float64 `json:"cpu_ratio_vs_reverseproxy"`
	CPURatioNginx        *float64 `json:"cpu_ratio_vs_nginx"`
	CPURatioHAProxy      *float64 `json:"cpu_ratio_vs_haproxy"`
	CPURatioNginxLua     *float64 `json:"cpu_ratio_vs_nginx_lua"`
	// RatioRawProxy and CPURatioRawProxy compare the gateway with the
	// bench's raw proxy (gateway_raw.go): Go without net/http, the floor
	// of any Go HTTP stack on this machine.
	RatioRawProxy    float64  `json:"rps_ratio_vs_rawproxy"`
	CPURatioRawProxy *float64 `json:"cpu_ratio_vs_rawproxy"`
	// LoadGenerator drives the 64-connection and tracing phases: "wrk",
	// pinned to the cores the proxies do not use, or "go" (the bench's own
	// net/http client, which cannot saturate a proxy's core) where wrk is
	// missing. Backend is the instant replica behind the predict paths:
	// "nginx" (return 200 with the fixed answer, one worker, on the load
	// generator's cores) or "go" where nginx is missing; SSE always
	// streams from the Go replica.
	LoadGenerator string `json:"load_generator"`
	Backend       string `json:"backend"`
	// Versions names what ran on each path: Go's version for ours, the
	// proxies' own version strings.
	Versions map[string]string `json:"versions"`
	// Workers is the worker processes or threads each proxy was given:
	// the gateway's GOMAXPROCS, so that every proxy has the cores the
	// gateway has.
	Workers int `json:"proxy_workers"`
	// Paths holds every path's numbers; Skipped why a proxy was left out.
	Paths   map[string]*GatewayPath `json:"paths"`
	Skipped map[string]string       `json:"skipped"`
	Rounds  int                     `json:"rounds"`
	// Cores is the machine's; Pinned says whether the proxies and the
	// gateway ran on core 0 and the load generator and replica on the rest
	// (taskset). GOMAXPROCS is the load generator's, GatewayGOMAXPROCS the
	// gateway process's.
	Cores             int     `json:"cores"`
	Pinned            bool    `json:"pinned"`
	GOMAXPROCS        int     `json:"gomaxprocs"`
	GatewayGOMAXPROCS int     `json:"gateway_gomaxprocs"`
	Seconds           float64 `json:"seconds"`
	// Profile is the gateway's CPU profile at 64 connections in the last
	// round; Profile+".traced" the traced gateway's in the same round, and
	// Profile+".sse" the gateway's during that round's SSE phase. Each has
	// an allocation profile beside it (".allocs": what the process
	// allocated since it started, read with -sample_index=alloc_space or
	// alloc_objects).
	Profile    string          `json:"cpu_profile,omitempty"`
	TargetsMet map[string]bool `json:"targets_met"`
}

// GatewayPath is one path's numbers, over all rounds.
type GatewayPath struct {
	P50MsC1     float64 `json:"p50_ms_c1"`
	P99MsC1     float64 `json:"p99_ms_c1"`
	RPSC64      float64 `json:"rps_c64"`
	P99MsC64    float64 `json:"p99_ms_c64"`
	ErrorsC1    int     `json:"errors_c1"`
	ErrorsC64   int     `json:"errors_c64"`
	RequestsC1  int     `json:"requests_c1"`
	RequestsC64 int     `json:"requests_c64"`
	// CPUUsPerRequestC64 is the proxy's CPU time (user and system, its
	// processes and their children, nginx's workers included) per request
	// at 64 clients, warm-up included; not for the direct path, which the
	// load generator serves. Unlike rps it does not swing with what else
	// the machine runs, so it is the fair reading on a shared machine.
	CPUUsPerRequestC64 float64 `json:"cpu_us_per_request_c64,omitempty"`
	// RPSC64Rounds is each round's rps at 64 clients.
	RPSC64Rounds []float64 `json:"rps_c64_rounds"`
	// CPUShareC64 is how much of one core each part used while this path
	// ran at 64 clients: whether the proxy was saturated, and whether the
	// load generator or the backend held it back.
	CPUShareC64 CPUShare `json:"cpu_share_c64"`

	url string
	pid int // the proxy's process, 0 for the direct path
	cpu time.Duration
	// loadCPU and backendCPU are the load generator's and the backend's
	// CPU time during this path's 64-client phases, wall their wall time.
	loadCPU, backendCPU, wall time.Duration
	// wrkRuns are wrk's figures of each 64-client phase.
	wrkRuns []wrkRun
	sent    int
	c1      []time.Duration
	c64     []time.Duration
	c64Sec  float64
}

// CPUShare is each part's CPU time over the phase's wall time: 1 is one
// core busy throughout.
type CPUShare struct {
	Proxy         float64 `json:"proxy"`
	LoadGenerator float64 `json:"load_generator"`
	Backend       float64 `json:"backend"`
}

// TracingSlice is one slice of the tracing phase: traced over untraced
// rps, p99 and CPU time per request, both measured over the same moments.
type TracingSlice struct {
	RPSRatio float64 `json:"rps_ratio"`
	P99Ratio float64 `json:"p99_ratio"`
	CPURatio float64 `json:"cpu_ratio"`
}

// Settings of `modelplane bench gateway`.
const (
	// childEnv makes this program a bench child: "gateway",
	// "reverseproxy" or "rawproxy"; childNATSEnv is the gateway child's
	// NATS, childUpstreamEnv the proxies' replica and childChatEnv the
	// reverse proxy's streaming replica.
	childEnv         = "MP_BENCH_GATEWAY_CHILD"
	childNATSEnv     = "MP_BENCH_GATEWAY_NATS"
	childCredsEnv    = "MP_BENCH_GATEWAY_NATS_CREDS"
	childUpstreamEnv = "MP_BENCH_GATEWAY_UPSTREAM"
	childChatEnv     = "MP_BENCH_GATEWAY_CHAT_UPSTREAM"
	predictEndpoint  = "bench"
	chatEndpoint     = "bench-chat"
	rounds           = 3
	c1Time           = 3 * time.Second
	c64Time          = 2 * time.Second
	c64Warmup        = 300 * time.Millisecond
	sseTime          = 4 * time.Second
	sseStreams       = 512
	sseEvents        = 16
	sseEventGap      = 50 * time.Millisecond
	sseStall         = 300 * time.Millisecond
	predictIn        = `{"instances":[{"amount":12.5,"country":"DE"},{"amount":900,"country":"US"}]}`
	predictOut       = `{"predictions":[{"label":"legit","score":0.12},{"label":"fraud","score":0.87}]}`
	chatIn           = `{"messages":[{"role":"user","content":"hello"}],"max_tokens":16,"stream":true}`
	predictSchema    = `{"type":"object","required":["amount","country"],"additionalProperties":false,
 "properties":{"amount":{"type":"number","minimum":0},"country":{"type":"string","minLength":2,"maxLength":2}}}`
)

// The tracing phase: per round, tracingSlices slices of tracingSlice
// each (whole seconds, wrk's unit), the untraced and the traced gateway
// driven at once. The Go client, where wrk is missing, also warms up
// for tracingWarmup unmeasured, as for c64Warmup at 64 connections; wrk
// measures from its first request, on gateways already warm from the
// phases before.
const (
	tracingSlices = 8
	tracingSlice  = time.Second
	tracingWarmup = 100 * time.Millisecond
)

// runGateway runs the benchmark, or, in the child processes it starts
// (pinned to their own core), the gateway or the bare reverse proxy.
func runGateway(ctx context.Context, cfg Config, out io.Writer) error {
	if mode := os.Getenv(childEnv); mode != "" {
		return runChild(ctx, mode, out)
	}
	res, err := measureGateway(ctx, cfg)
	if err != nil {
		return err
	}
	return emit(out, cfg.JSON, res, "gateway: added p99 at c1 %.3f ms; %.0f req/s at c64 (%.2fx ReverseProxy); SSE %d streams added TTFT p99 %.3f ms, %d stalls\n",
		res.AddedP99MsC1, res.RPSC64, res.RatioReverseProxy, res.SSEStreams, res.SSEAddedTTFTP99Ms, res.SSEStalls)
}

// replica answers predict with a fixed JSON at once and chat with a
// fixed stream of events; the gateway and rollback benchmarks serve it.
func replica() http.Handler {
	mux := http.NewServeMux()
	answer := []byte(predictOut)
	mux.HandleFunc("POST /predict", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(answer)))
		_, _ = w.Write(answer)
	})
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Cache-Control", "no-cache")
		rc := http.NewResponseController(w)
		for i := range sseEvents {
			if i > 0 {
				select {
				case <-r.Context().Done():
					return
				case <-time.After(sseEventGap):
				}
			}
			fmt.Fprintf(w, "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"tok%d \"}}]}\n\n", i)
			if rc.Flush() != nil {
				return
			}
		}
		_, _ = io.WriteString(w, "data: [DONE]\n\n")
		_ = rc.Flush()
	})
	return mux
}

// predict posts body to u with the API key and returns the version that
// answered (X-Model-Version); any status but 200 is an error.
func predict(ctx context.Context, client *http.Client, key, u, body string) (string, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, u, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s: status %d", u, resp.StatusCode)
	}
	return resp.Header.Get("X-Model-Version"), nil
}

// loadClient is an HTTP client for many connections to a few hosts.
func loadClient(s *scratch, maxIdle, maxIdlePerHost int) *http.Client {
	tr := &http.Transport{Proxy: nil, MaxIdleConns: maxIdle, MaxIdleConnsPerHost: maxIdlePerHost, IdleConnTimeout: 90 * time.Second,
		DisableCompression: true, DialContext: (&net.Dialer{Timeout: 5 * time.Second}).DialContext}
	s.onClose(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}

// runChild serves the gateway or the bare reverse proxy on a free port,
// prints "addr control-addr gomaxprocs" and serves until stdin closes. The
// control address starts (/start?file=) and stops (/stop) a CPU profile.
func runChild(ctx context.Context, mode string, out io.Writer) error {
	s, err := newScratch("mp-bench-gw-")
	if err != nil {
		return err
	}
	defer s.close()
	var addr string
	if mode == "rawproxy" {
		addr, err = startRawProxy(s, os.Getenv(childUpstreamEnv))
	} else {
		var h http.Handler
		if h, err = childHandler(ctx, s, mode); err == nil {
			if mode == "gateway" {
				addr, err = s.serveGateway(h)
			} else {
				addr, err = s.serve(h)
			}
		}
	}
	if err != nil {
		return err
	}
	ctl, err := s.serve(profileControl())
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintf(out, "%s %s %d\n", addr, ctl, runtime.GOMAXPROCS(0)); err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, os.Stdin)
	return nil
}

// childHandler is what a child of mode serves.
func childHandler(ctx context.Context, s *scratch, mode string) (http.Handler, error) {
	switch mode {
	case "gateway":
		// As `modelplane gateway` runs; the bare reverse proxy keeps Go's
		// default, so that it stays the bare floor.
		gateway.TuneGC()
		opts, err := bus.ClientConfig{URL: os.Getenv(childNATSEnv), Creds: os.Getenv(childCredsEnv)}.Options(nil)
		if err != nil {
			return nil, err
		}
		nc, err := nats.Connect(os.Getenv(childNATSEnv), opts...)
		if err != nil {
			return nil, err
		}
		s.onClose(nc.Close)
		g, err := startGateway(ctx, nc, s.dir, "", time.Second)
		if err != nil {
			return nil, err
		}
		s.onClose(g.Stop)
		return g.Handler(), nil
	case "reverseproxy":
		up, err := url.Parse("http://" + os.Getenv(childUpstreamEnv))
		if err != nil {
			return nil, err
		}
		// Streams go to the Go replica, predictions to the backend.
		chat, err := url.Parse("http://" + os.Getenv(childChatEnv))
		if err != nil {
			return nil, err
		}
		tr := &http.Transport{Proxy: nil, DialContext: (&net.Dialer{Timeout: time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConns: 4096, MaxIdleConnsPerHost: 4096, IdleConnTimeout: 90 * time.Second, DisableCompression: true}
		// Its log is discarded as the gateway's is: wrk ends a run by
		// closing its connections mid-request, which it would log each time.
		return &httputil.ReverseProxy{Transport: tr, FlushInterval: -1, ErrorLog: log.New(io.Discard, "", 0), Rewrite: func(pr *httputil.ProxyRequest) {
			if strings.HasPrefix(pr.In.URL.Path, "/v1/chat/") {
				pr.SetURL(chat)
			} else {
				pr.SetURL(up)
			}
		}}, nil
	}
	return nil, fmt.Errorf("unknown bench child %q", mode)
}

// profileControl starts (/start?file=) and stops (/stop) a CPU profile of
// this process.
func profileControl() http.Handler {
	mux := http.NewServeMux()
	var pf *os.File
	mux.HandleFunc("/start", func(w http.ResponseWriter, r *http.Request) {
		f, err := os.Create(r.URL.Query().Get("file"))
		if err == nil {
			if err = pprof.StartCPUProfile(f); err == nil {
				pf = f
			}
		}
		if err != nil {
			http.Error(w, err.Error(), 500)
		}
	})
	mux.HandleFunc("/stop", func(w http.ResponseWriter, _ *http.Request) {
		if pf == nil {
			return
		}
		pprof.StopCPUProfile()
		pf.Close()
		err := writeAllocs(pf.Name() + ".allocs")
		pf = nil
		if err != nil {
			http.Error(w, err.Error(), 500)
		}
	})
	return mux
}

// writeAllocs writes this process's allocation profile to file.
func writeAllocs(file string) error {
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// proc is a child process: one of ours or a proxy.
type proc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
}

// stop closes our child's stdin or signals a proxy, and kills it if it
// has not ended within 3 seconds.
func (p *proc) stop() {
	if p == nil || p.cmd == nil || p.cmd.Process == nil {
		return
	}
	if p.stdin != nil {
		p.stdin.Close()
	} else {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(3 * time.Second):
		_ = p.cmd.Process.Kill()
		<-done
	}
}

// pinned prefixes argv with taskset -c core when pin is set.
func pinned(pin bool, core string, argv ...string) []string {
	if !pin {
		return argv
	}
	return append([]string{"taskset", "-c", core}, argv...)
}

// child is a started bench child: its serving and control addresses and
// its GOMAXPROCS.
type child struct {
	*proc
	addr, ctl  string
	gomaxprocs int
}

// startChild starts this program as a bench child with env added (and
// GOMAXPROCS removed) and reads its addresses.
func startChild(pin bool, env ...string) (*child, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	argv := pinned(pin, "0", exe, "bench", "gateway")
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Env = slices.DeleteFunc(cmd.Env, func(s string) bool { return strings.HasPrefix(s, "GOMAXPROCS=") })
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &proc{cmd: cmd, stdin: stdin}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		p.stop()
		return nil, fmt.Errorf("bench child: %w", err)
	}
	f := strings.Fields(line)
	if len(f) != 3 {
		p.stop()
		return nil, fmt.Errorf("bench child said %q", line)
	}
	n, _ := strconv.Atoi(f[2])
	return &child{proc: p, addr: f[0], ctl: f[1], gomaxprocs: n}, nil
}

// errProxyMissing is startProxy's answer for a proxy not installed.
var errProxyMissing = errors.New("not installed")

// startProxy writes a plain-proxy config for name (nginx, haproxy or
// caddy) with workers worker processes or threads in dir/name, starts it
// on a free port in front of upstream and waits until it takes
// connections. It returns the proxy's version string too.
func startProxy(name, dir, upstream string, workers int, pin bool) (*proc, string, string, error) {
	bin, err := proxyBin(name)
	if err != nil {
		return nil, "", "", err
	}
	p, addr, err := runProxy(name, dir, workers, pin, func(pdir, addr string) (string, []string) {
		return proxyConfig(name, bin, pdir, addr, upstream, workers)
	})
	if err != nil {
		return nil, "", "", err
	}
	return p, addr, proxyVersion(name, bin), nil
}

// runProxy starts a proxy in dir/name on a free port, pinned to core 0:
// config gives its config file's text for its directory and address, and
// the command line that runs it on dir/name/proxy.conf. It waits until
// the proxy takes connections.
func runProxy(name, dir string, workers int, pin bool, config func(pdir, addr string) (string, []string)) (*proc, string, error) {
	port, err := freeport.Get()
	if err != nil {
		return nil, "", err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	pdir := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Join(pdir, "tmp"), 0o755); err != nil {
		return nil, "", err
	}
	conf, argv := config(pdir, addr)
	if err := os.WriteFile(filepath.Join(pdir, "proxy.conf"), []byte(conf), 0o644); err != nil {
		return nil, "", err
	}
	p, err := launch(pinned(pin, "0", argv...), pdir, addr, workers)
	if err != nil {
		return nil, "", err
	}
	return p, addr, nil
}

// launch starts argv in pdir with workers as its GOMAXPROCS and waits
// until it takes connections on addr.
func launch(argv []string, pdir, addr string, workers int) (*proc, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = pdir
	cmd.Env = append(os.Environ(), "HOME="+pdir, "XDG_DATA_HOME="+pdir, "XDG_CONFIG_HOME="+pdir)
	// Caddy is a Go program: its workers are its GOMAXPROCS.
	cmd.Env = append(slices.DeleteFunc(cmd.Env, func(s string) bool { return strings.HasPrefix(s, "GOMAXPROCS=") }),
		"GOMAXPROCS="+strconv.Itoa(workers))
	var logBuf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logBuf, &logBuf
	// nginx's workers keep the output pipe open after their master ends.
	cmd.WaitDelay = time.Second
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &proc{cmd: cmd}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond); err == nil {
			c.Close()
			return p, nil
		}
		if time.Now().After(deadline) || (cmd.ProcessState != nil) {
			p.stop()
			return nil, fmt.Errorf("did not start: %s", strings.TrimSpace(logBuf.String()))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// proxyBin is where the proxy name is installed: on PATH or in
// /usr/sbin; errProxyMissing where neither.
func proxyBin(name string) (string, error) {
	if bin, err := exec.LookPath(name); err == nil {
		return bin, nil
	}
	if _, err := os.Stat("/usr/sbin/" + name); err != nil {
		return "", errProxyMissing
	}
	return "/usr/sbin/" + name, nil
}

// proxyVersion is what bin (the proxy name) says its version is, "" when
// it says nothing readable.
func proxyVersion(name, bin string) string {
	arg := "-v"
	if name == "caddy" {
		arg = "version"
	}
	out, _ := exec.Command(bin, arg).CombinedOutput()
	return versionIn(string(out))
}

// versionIn is the version in a proxy's version output: "nginx version:
// nginx/1.22.1", "HAProxy version 2.6.12-1 2023/…" or "v2.6.2 h1:…".
func versionIn(out string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(out), "\n")
	f := strings.Fields(line)
	for i, w := range f {
		if strings.HasPrefix(w, "version") && i+1 < len(f) {
			return strings.TrimPrefix(f[i+1], "nginx/")
		}
	}
	if len(f) > 0 {
		return f[0]
	}
	return ""
}

// proxyConfig is name's config file, serving addr in front of upstream
// from pdir with workers worker processes (nginx) or threads (HAProxy),
// and the command line that runs bin on it. Neither logs requests, as
// the gateway and ReverseProxy children log none.
func proxyConfig(name, bin, pdir, addr, upstream string, workers int) (string, []string) {
	nw := strconv.Itoa(workers)
	confFile := filepath.Join(pdir, "proxy.conf")
	switch name {
	case "nginx":
		return nginxConf(pdir, workers, nil, `  upstream replica { server `+upstream+`; keepalive 1024; keepalive_requests 1000000; }
  server {
    listen `+addr+`;
    location / {
      proxy_pass http://replica;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
    }
  }
`), nginxArgv(bin, pdir, confFile)
	case "haproxy":
		return `global
  maxconn 4000
  nbthread ` + nw + `
defaults
  mode http
  timeout connect 5s
  timeout client 60s
  timeout server 60s
  option http-keep-alive
  http-reuse always
frontend f
  bind ` + addr + `
  default_backend b
backend b
  server replica ` + upstream + ` maxconn 4000
`, []string{bin, "-db", "-f", confFile}
	case "caddy":
		return `{
	admin off
	auto_https off
	log default {
		output discard
	}
}
http://` + addr + ` {
	reverse_proxy ` + upstream + ` {
		flush_interval -1
	}
}
`, []string{bin, "run", "--adapter", "caddyfile", "--config", confFile}
	}
	return "", nil
}

// nginxArgv is the command line that runs nginx (bin) from pdir on the
// config file conf, logging its errors there.
func nginxArgv(bin, pdir, conf string) []string {
	return []string{bin, "-e", pdir + "/error.log", "-p", pdir, "-c", conf}
}

// nginxConf is an nginx config run from pdir, as every nginx of the
// benchmark runs: workers worker processes in the foreground, the modules
// loaded, no request log, temporary files in pdir/tmp, connections kept
// for a million requests, and http inside the http block.
func nginxConf(pdir string, workers int, modules []string, http string) string {
	var b strings.Builder
	if os.Geteuid() == 0 {
		b.WriteString("user root;\n")
	}
	for _, m := range modules {
		b.WriteString("load_module " + m + ";\n")
	}
	t := filepath.Join(pdir, "tmp")
	b.WriteString(`worker_processes ` + strconv.Itoa(workers) + `;
daemon off;
master_process on;
pid ` + pdir + `/nginx.pid;
error_log ` + pdir + `/error.log warn;
events { worker_connections 8192; multi_accept on; }
http {
  access_log off;
  client_body_temp_path ` + t + `/body; proxy_temp_path ` + t + `/proxy; fastcgi_temp_path ` + t + `/fcgi;
  uwsgi_temp_path ` + t + `/uwsgi; scgi_temp_path ` + t + `/scgi;
  keepalive_requests 1000000;
` + http + `}
`)
	return b.String()
}

// gatewayBench is one run of the gateway benchmark: the paths it measures
// and what it has measured so far.
type gatewayBench struct {
	cfg    Config
	res    GatewayResult
	s      *scratch
	pin    bool
	direct string // the first replica's address
	// replicas are the predict endpoint's replicas' addresses.
	replicas []string
	gw, rp   *child
	// traced is the gateway that traces every request.
	traced *child
	// backend is the nginx instant backend (nil: the Go replica); chat is
	// the Go replica that streams.
	backend *proc
	chat    string
	// wrk is wrk's path and wrkScript its Lua script; empty: the Go client.
	wrk, wrkScript string
	key            string
	client         *http.Client
	// order is the paths present, in the order of a round's first turn.
	order  []string
	paired []time.Duration
	// sse is the streams' numbers direct, through the gateway and
	// through the reverse proxy.
	sse [3]sseStats
	// tracing is the tracing phase's numbers, untraced [0] and traced [1];
	// vsNginx, vsHAProxy and vsNginxLua the proxy's [0] and the
	// gateway's [1].
	tracing, vsNginx, vsHAProxy, vsNginxLua pairStats
}

// pairStats accumulates two paths driven at once (atOnce): each slice's
// ratios, and per path the CPU time and requests sent.
type pairStats struct {
	slices []TracingSlice
	cpu    [2]time.Duration
	sent   [2]int
}

// usPerRequest is each path's CPU time per request, zero where it sent
// nothing.
func (t *pairStats) usPerRequest() [2]float64 {
	var us [2]float64
	for k := range 2 {
		if t.sent[k] > 0 {
			us[k] = round3(float64(t.cpu[k].Nanoseconds()) / 1e3 / float64(t.sent[k]))
		}
	}
	return us
}

// measureGateway starts two replicas, NATS with the routes and a key, the
// gateway and the bare reverse proxy as children and the installed
// proxies, then runs the rounds: each measures every path at concurrency
// 1 (in turn), at 64 (one after the other) and with SSE streams.
func measureGateway(ctx context.Context, cfg Config) (GatewayResult, error) {
	began := time.Now()
	b := &gatewayBench{cfg: cfg, res: GatewayResult{Name: "gateway", Paths: map[string]*GatewayPath{}, Skipped: map[string]string{}, Versions: map[string]string{}, Rounds: rounds,
		Cores: runtime.NumCPU(), SSEStreams: sseStreams, SSEEvents: sseEvents,
		SSEEventGapMs: ms(sseEventGap), SSEStallMs: ms(sseStall)}}
	s, err := newScratch("mp-bench-gw-")
	if err != nil {
		return b.res, err
	}
	defer s.close()
	b.s = s
	b.pin = pinSelf()
	b.res.Pinned = b.pin
	b.res.GOMAXPROCS = runtime.GOMAXPROCS(0)
	if err := b.start(ctx); err != nil {
		return b.res, err
	}
	for round := range rounds {
		if err := b.round(ctx, round); err != nil {
			return b.res, err
		}
	}
	b.summarize(began)
	return b.res, nil
}

// pinSelf moves this process (load generator, replicas, NATS) off core 0,
// which the proxies and the gateway get, where taskset is installed and
// there are two cores or more; it reports whether it did.
func pinSelf() bool {
	if _, err := exec.LookPath("taskset"); err != nil || runtime.NumCPU() < 2 {
		return false
	}
	others := fmt.Sprintf("1-%d", runtime.NumCPU()-1)
	if err := exec.Command("taskset", "-a", "-p", "-c", others, strconv.Itoa(os.Getpid())).Run(); err != nil {
		return false
	}
	runtime.GOMAXPROCS(runtime.NumCPU() - 1)
	return true
}

// start brings up everything the rounds measure and waits until every
// path answers.
func (b *gatewayBench) start(ctx context.Context) error {
	// The replica: two listeners, so each version has two replicas.
	var replicas []string
	for range 2 {
		addr, err := b.s.serve(replica())
		if err != nil {
			return err
		}
		replicas = append(replicas, addr)
	}
	b.chat = replicas[0]
	predictReplicas := replicas
	b.res.Backend = "go"
	if p, addrs, err := startBackend(b.s.dir, b.pin); err == nil {
		b.s.onClose(p.stop)
		b.backend, predictReplicas, b.res.Backend = p, addrs, "nginx"
	} else {
		b.res.Skipped["backend"] = "nginx as the instant backend: " + err.Error() + "; the Go replica answers"
	}
	b.direct, b.replicas = predictReplicas[0], predictReplicas
	natsURL, js, err := b.s.nats(ctx)
	if err != nil {
		return err
	}
	if err := putRoutes(ctx, js, predictReplicas, replicas); err != nil {
		return err
	}
	if b.key, err = putKey(ctx, js); err != nil {
		return err
	}
	if err := b.setUpWrk(); err != nil {
		return err
	}
	if err := b.startPaths(natsURL); err != nil {
		return err
	}
	b.client = loadClient(b.s, 8192, 4096)
	return b.waitPaths(ctx)
}

// putRoutes writes the predict and chat endpoints' routing entries: a
// stable and a canary version at 90/10, each on every replica of its
// endpoint.
func putRoutes(ctx context.Context, js jetstream.JetStream, predictReplicas, chatReplicas []string) error {
	routes, err := js.KeyValue(ctx, busapi.BucketRoutes)
	if err != nil {
		return err
	}
	versions := func(replicas []string) []busapi.RouteVersion {
		var vs []busapi.RouteVersion
		for i, name := range []string{"stable", "canary"} {
			v := busapi.RouteVersion{Name: name, Weight: []int{90, 10}[i]}
			for j, a := range replicas {
				v.Replicas = append(v.Replicas, busapi.RouteReplica{ID: fmt.Sprintf("%s-%d", name, j), Addr: a})
			}
			vs = append(vs, v)
		}
		return vs
	}
	for _, rt := range []busapi.Route{
		{Endpoint: predictEndpoint, Team: "bench", Task: "classification", Generation: 1, Versions: versions(predictReplicas),
			InputSchema: json.RawMessage(predictSchema), FeatureNames: []string{"amount", "country"}, SamplingRate: 0.01},
		{Endpoint: chatEndpoint, Team: "bench", Task: "llm", Generation: 1, Versions: versions(chatReplicas), SamplingRate: 0.01},
	} {
		b, _ := json.Marshal(rt)
		if _, err := routes.Put(ctx, rt.Endpoint, b); err != nil {
			return err
		}
	}
	return nil
}

// startPaths starts the gateway and the bare reverse proxy, each its own
// process, and the installed proxies, and names every path's URL.
func (b *gatewayBench) startPaths(natsURL string) error {
	cred, err := b.s.natsAuth.Gateway("bench")
	if err != nil {
		return err
	}
	creds := filepath.Join(b.s.dir, "gateway.creds")
	if err := cred.WriteFile(creds); err != nil {
		return err
	}
	gw, err := startChild(b.pin, childEnv+"=gateway", childNATSEnv+"="+natsURL, childCredsEnv+"="+creds, "OTEL_SDK_DISABLED=true")
	if err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	sink, err := b.s.serve(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.Copy(io.Discard, r.Body) }))
	if err != nil {
		return err
	}
	traced, err := startChild(b.pin, childEnv+"=gateway", childNATSEnv+"="+natsURL, childCredsEnv+"="+creds, "OTEL_SDK_DISABLED=false",
		"OTEL_TRACES_EXPORTER=otlp", "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf", "OTEL_EXPORTER_OTLP_ENDPOINT=http://"+sink,
		"OTEL_TRACES_SAMPLER=", "OTEL_TRACES_SAMPLER_ARG=1")
	if err != nil {
		return fmt.Errorf("traced gateway: %w", err)
	}
	b.s.onClose(traced.stop)
	b.s.onClose(gw.stop)
	b.gw, b.traced, b.res.GatewayGOMAXPROCS = gw, traced, gw.gomaxprocs
	rp, err := startChild(b.pin, childEnv+"=reverseproxy", childUpstreamEnv+"="+b.direct, childChatEnv+"="+b.chat)
	if err != nil {
		return fmt.Errorf("reverse proxy: %w", err)
	}
	b.s.onClose(rp.stop)
	b.rp = rp
	raw, err := startChild(b.pin, childEnv+"=rawproxy", childUpstreamEnv+"="+b.direct)
	if err != nil {
		return fmt.Errorf("raw proxy: %w", err)
	}
	b.s.onClose(raw.stop)
	b.res.Paths["rawproxy"] = &GatewayPath{url: "http://" + raw.addr + "/predict", pid: raw.cmd.Process.Pid}
	b.res.Versions["rawproxy"] = runtime.Version()
	b.res.Paths["direct"] = &GatewayPath{url: "http://" + b.direct + "/predict"}
	b.res.Paths["gateway"] = &GatewayPath{url: "http://" + gw.addr + "/v1/endpoints/" + predictEndpoint + "/predict", pid: gw.cmd.Process.Pid}
	b.res.Paths["gateway_traced"] = &GatewayPath{url: "http://" + traced.addr + "/v1/endpoints/" + predictEndpoint + "/predict", pid: traced.cmd.Process.Pid}
	b.res.Paths["reverseproxy"] = &GatewayPath{url: "http://" + rp.addr + "/predict", pid: rp.cmd.Process.Pid}
	b.res.Versions["gateway"], b.res.Versions["reverseproxy"] = runtime.Version(), runtime.Version()
	b.res.Workers = max(1, gw.gomaxprocs)
	for _, name := range []string{"nginx", "haproxy", "caddy"} {
		p, addr, version, err := startProxy(name, b.s.dir, b.direct, b.res.Workers, b.pin)
		if err != nil {
			b.res.Skipped[name] = err.Error()
			continue
		}
		b.s.onClose(p.stop)
		b.res.Paths[name] = &GatewayPath{url: "http://" + addr + "/predict", pid: p.cmd.Process.Pid}
		b.res.Versions[name] = version
	}
	if p, addr, version, err := startPeer(b.s.dir, b.key, b.replicas, b.res.Workers, b.pin); err != nil {
		b.res.Skipped["nginx_lua"] = err.Error()
	} else {
		b.s.onClose(p.stop)
		b.res.Paths["nginx_lua"] = &GatewayPath{url: "http://" + addr + "/v1/endpoints/" + predictEndpoint + "/predict", pid: p.cmd.Process.Pid}
		b.res.Versions["nginx_lua"] = version
	}
	b.order = []string{"direct", "gateway", "gateway_traced", "reverseproxy", "rawproxy", "nginx", "haproxy", "caddy", "nginx_lua"}
	b.order = slices.DeleteFunc(b.order, func(n string) bool { return b.res.Paths[n] == nil })
	return nil
}

// post sends body to u as a prediction with the key.
func (b *gatewayBench) post(ctx context.Context, u, body string) error {
	_, err := predict(ctx, b.client, b.key, u, body)
	return err
}

// waitPaths waits until every path answers (the gateway loads its table
// and key).
func (b *gatewayBench) waitPaths(ctx context.Context) error {
	for _, n := range b.order {
		deadline := time.Now().Add(15 * time.Second)
		for {
			err := b.post(ctx, b.res.Paths[n].url, predictIn)
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s never answered: %w", n, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return nil
}

// round measures every path once at c1, c64 and with SSE, starting each
// phase from a path further along the order than the last round did.
func (b *gatewayBench) round(ctx context.Context, round int) error {
	rot := append(slices.Clone(b.order[round%len(b.order):]), b.order[:round%len(b.order)]...)
	b.c1(ctx, rot)
	last := round == rounds-1 && b.cfg.Profile != ""
	for _, n := range rot {
		p := b.res.Paths[n]
		ch, file := b.gw, b.cfg.Profile
		if n == "gateway_traced" {
			ch, file = b.traced, b.cfg.Profile+".traced"
		}
		var lerr error
		abs, err := b.profiled(ctx, ch, last && (n == "gateway" || n == "gateway_traced"), file, func() { lerr = b.c64(ctx, p) })
		if err != nil {
			return err
		}
		if lerr != nil {
			return fmt.Errorf("%s at 64 connections: %w", n, lerr)
		}
		if abs != "" && n == "gateway" {
			b.res.Profile = abs
		}
	}
	b.atOnce(ctx, [2]*GatewayPath{b.res.Paths["gateway"], b.res.Paths["gateway_traced"]}, &b.tracing)
	if p := b.res.Paths["nginx"]; p != nil {
		b.atOnce(ctx, [2]*GatewayPath{p, b.res.Paths["gateway"]}, &b.vsNginx)
	}
	if p := b.res.Paths["haproxy"]; p != nil {
		b.atOnce(ctx, [2]*GatewayPath{p, b.res.Paths["gateway"]}, &b.vsHAProxy)
	}
	if p := b.res.Paths["nginx_lua"]; p != nil {
		b.atOnce(ctx, [2]*GatewayPath{p, b.res.Paths["gateway"]}, &b.vsNginxLua)
	}
	// SSE: direct, through the gateway and through the bare reverse
	// proxy (the floor of a net/http proxy), rotating which goes first.
	urls := [3]string{"http://" + b.chat + "/v1/chat/completions", "http://" + b.gw.addr + "/v1/endpoints/" + chatEndpoint + "/chat/completions",
		"http://" + b.rp.addr + "/v1/chat/completions"}
	for i := range 3 {
		k := (i + round) % 3
		if _, err := b.profiled(ctx, b.gw, last && k == 1, b.cfg.Profile+".sse", func() {
			streams(ctx, b.client, b.key, urls[k], &b.sse[k])
		}); err != nil {
			return err
		}
	}
	return nil
}

// c64 drives path p with 64 connections for c64Time, with wrk where it is
// installed, and adds the figures to p's. Every part's CPU time is read
// around the run: the proxy's, the load generator's and the backend's.
func (b *gatewayBench) c64(ctx context.Context, p *GatewayPath) error {
	var backendPID int
	if b.backend != nil {
		backendPID = b.backend.cmd.Process.Pid
	}
	cpu0, backend0, self0 := treeCPU(p.pid), treeCPU(backendPID), pidCPU(os.Getpid())
	t0 := time.Now()
	var rps float64
	var loadCPU time.Duration
	if b.wrk != "" {
		r, err := b.wrkLoad(ctx, p.url, 64, c64Time)
		if err != nil {
			return err
		}
		rps, loadCPU = r.rps(), r.cpu
		p.wrkRuns = append(p.wrkRuns, r)
		p.ErrorsC64 += r.statusErrors + r.socketErrors
		p.c64Sec += r.seconds
		p.sent += r.requests
	} else {
		lat, errs, secs, sent := b.load(ctx, p.url, 64, c64Warmup, c64Time)
		if secs > 0 {
			rps = float64(len(lat)) / secs
		}
		p.c64 = append(p.c64, lat...)
		p.ErrorsC64 += errs
		p.c64Sec += secs
		p.sent += sent
	}
	wall := time.Since(t0)
	if b.wrk == "" {
		// The Go client is this process, which also serves the Go
		// replica when it is the backend.
		loadCPU = pidCPU(os.Getpid()) - self0
	}
	p.cpu += treeCPU(p.pid) - cpu0
	p.loadCPU += loadCPU
	p.backendCPU += treeCPU(backendPID) - backend0
	p.wall += wall
	p.RPSC64Rounds = append(p.RPSC64Rounds, round3(rps))
	return nil
}

// c1 sends one request to every path in turn until c1Time is over, so all
// see the same moments, and pairs the gateway's time with the direct one.
func (b *gatewayBench) c1(ctx context.Context, rot []string) {
	end := time.Now().Add(c1Time)
	for time.Now().Before(end) {
		var dDirect, dGW time.Duration
		for _, n := range rot {
			p := b.res.Paths[n]
			t0 := time.Now()
			err := b.post(ctx, p.url, predictIn)
			d := time.Since(t0)
			if err != nil {
				p.ErrorsC1++
				continue
			}
			p.c1 = append(p.c1, d)
			switch n {
			case "direct":
				dDirect = d
			case "gateway":
				dGW = d
			}
		}
		if dDirect > 0 && dGW > 0 {
			b.paired = append(b.paired, dGW-dDirect)
		}
	}
}

// profiled runs f, under a CPU profile of the gateway child ch written to
// file when on, and returns the profile's absolute path (empty when off).
func (b *gatewayBench) profiled(ctx context.Context, ch *child, on bool, file string, f func()) (string, error) {
	if !on {
		f()
		return "", nil
	}
	abs, _ := filepath.Abs(file)
	if err := b.post(ctx, "http://"+ch.ctl+"/start?file="+url.QueryEscape(abs), ""); err != nil {
		return "", fmt.Errorf("start profile: %w", err)
	}
	f()
	_ = b.post(ctx, "http://"+ch.ctl+"/stop", "")
	return abs, nil
}

// atOnce drives paths gws at once, 32 clients each, in tracingSlices
// slices of tracingSlice, and adds each slice's ratios (the second path's
// over the first's) and each path's CPU time and requests to t. Slices
// in which the first path finished nothing (the machine held it off for
// the whole slice) are left out of the ratios.
func (b *gatewayBench) atOnce(ctx context.Context, gws [2]*GatewayPath, t *pairStats) {
	for range tracingSlices {
		var rps, p99 [2]float64
		var cpu [2]time.Duration
		var sent [2]int
		var wg sync.WaitGroup
		for k := range 2 {
			wg.Go(func() {
				cpu0 := treeRunTime(gws[k].pid)
				if b.wrk != "" {
					// A slice that wrk could not run counts as nothing sent,
					// and is left out below.
					r, _ := b.wrkLoad(ctx, gws[k].url, 32, tracingSlice)
					cpu[k], sent[k] = treeRunTime(gws[k].pid)-cpu0, r.requests
					rps[k], p99[k] = r.rps(), ms(r.p99)
					return
				}
				lat, _, secs, n := b.load(ctx, gws[k].url, 32, tracingWarmup, tracingSlice)
				cpu[k], sent[k] = treeRunTime(gws[k].pid)-cpu0, n
				if secs > 0 {
					rps[k] = float64(len(lat)) / secs
				}
				p99[k] = percentile(lat, 0.99)
			})
		}
		wg.Wait()
		t.cpu[0], t.cpu[1] = t.cpu[0]+cpu[0], t.cpu[1]+cpu[1]
		t.sent[0], t.sent[1] = t.sent[0]+sent[0], t.sent[1]+sent[1]
		if rps[0] > 0 && p99[0] > 0 && rps[1] > 0 {
			sl := TracingSlice{RPSRatio: round3(rps[1] / rps[0]), P99Ratio: round3(p99[1] / p99[0])}
			if cpu[0] > 0 && sent[0] > 0 && sent[1] > 0 {
				sl.CPURatio = round3((float64(cpu[1]) / float64(sent[1])) / (float64(cpu[0]) / float64(sent[0])))
			}
			t.slices = append(t.slices, sl)
		}
	}
}

// runTime is the time process pid's threads have run so far, in the
// scheduler's nanoseconds (/proc/<pid>/task/*/schedstat), so that a slice
// of a quarter second is measured finely; /proc/<pid>/stat's 10 ms ticks
// where the scheduler does not say.
func runTime(pid int) time.Duration {
	stats, _ := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*/schedstat")
	var total time.Duration
	for _, f := range stats {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // the thread ended
		}
		ns, err := strconv.ParseInt(string(bytes.Fields(b)[0]), 10, 64)
		if err != nil {
			return pidCPU(pid)
		}
		total += time.Duration(ns)
	}
	if total == 0 {
		return pidCPU(pid)
	}
	return total
}

// load drives u with n concurrent clients for d after an unmeasured
// warm-up and returns the latencies, errors, seconds and requests sent
// (warm-up included).
func (b *gatewayBench) load(ctx context.Context, u string, n int, warmup, d time.Duration) ([]time.Duration, int, float64, int) {
	start := time.Now().Add(warmup)
	end := start.Add(d)
	var mu sync.Mutex
	var all []time.Duration
	var errs, sent atomic.Int64
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			mine := make([]time.Duration, 0, 4096)
			for {
				t0 := time.Now()
				if !t0.Before(end) {
					break
				}
				err := b.post(ctx, u, predictIn)
				sent.Add(1)
				if t0.Before(start) {
					continue
				}
				if err != nil {
					errs.Add(1)
					continue
				}
				mine = append(mine, time.Since(t0))
			}
			mu.Lock()
			all = append(all, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	return all, int(errs.Load()), time.Since(start).Seconds(), int(sent.Load())
}

// clockTick is the unit of /proc/<pid>/stat's CPU times (USER_HZ, 100 on
// every Linux this runs on).
const clockTick = 10 * time.Millisecond

// treeCPU is the CPU time so far (user and system) of process pid and
// its descendants (nginx's workers), zero for pid 0 or where /proc cannot
// say; treeRunTime is the same from runTime.
func treeCPU(pid int) time.Duration {
	if pid == 0 {
		return 0
	}
	return tree(pid, pidCPU)
}

func treeRunTime(pid int) time.Duration { return tree(pid, runTime) }

// tree sums f over process pid and its descendants.
func tree(pid int, f func(int) time.Duration) time.Duration {
	total := f(pid)
	tasks, _ := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*/children")
	for _, t := range tasks {
		b, _ := os.ReadFile(t)
		for _, c := range strings.Fields(string(b)) {
			if c, err := strconv.Atoi(c); err == nil {
				total += tree(c, f)
			}
		}
	}
	return total
}

// pidCPU is process pid's own CPU time so far (user and system), zero
// where /proc cannot say.
func pidCPU(pid int) time.Duration {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// The fields after the command name (which may hold spaces, in
	// parentheses): state is the first, utime the 12th, stime the 13th.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	user, _ := strconv.ParseInt(f[11], 10, 64)
	sys, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(user+sys) * clockTick
}

// summarize turns the samples into the result's figures and targets.
func (b *gatewayBench) summarize(began time.Time) {
	res := &b.res
	for _, p := range res.Paths {
		p.RequestsC1, p.RequestsC64 = len(p.c1), len(p.c64)
		p.P50MsC1, p.P99MsC1 = percentile(p.c1, 0.50), percentile(p.c1, 0.99)
		p.P99MsC64 = percentile(p.c64, 0.99)
		if len(p.wrkRuns) > 0 {
			// wrk's percentiles do not merge across runs: the median of
			// the rounds' p99s.
			var p99s []float64
			p.RequestsC64 = 0
			for _, r := range p.wrkRuns {
				p.RequestsC64 += r.requests - r.statusErrors
				p99s = append(p99s, ms(r.p99))
			}
			p.P99MsC64 = medianF(p99s)
		}
		if p.c64Sec > 0 {
			p.RPSC64 = float64(p.RequestsC64) / p.c64Sec
		}
		if w := p.wall.Seconds(); w > 0 {
			p.CPUShareC64 = CPUShare{Proxy: round3(p.cpu.Seconds() / w), LoadGenerator: round3(p.loadCPU.Seconds() / w),
				Backend: round3(p.backendCPU.Seconds() / w)}
		}
		if p.pid != 0 && p.sent > 0 {
			p.CPUUsPerRequestC64 = round3(float64(p.cpu.Microseconds()) / float64(p.sent))
		}
	}
	g := res.Paths["gateway"]
	res.AddedP99MsC1 = round3(g.P99MsC1 - res.Paths["direct"].P99MsC1)
	res.AddedP99PairedMsC1 = round3(percentile(b.paired, 0.99))
	res.RPSC64 = float64(int(g.RPSC64))
	res.RPSRatioRounds = map[string][]float64{}
	ratio := func(n string) *float64 {
		p := res.Paths[n]
		if p == nil || len(p.RPSC64Rounds) != len(g.RPSC64Rounds) {
			return nil
		}
		var rs []float64
		for i, rps := range p.RPSC64Rounds {
			if rps > 0 {
				rs = append(rs, round3(g.RPSC64Rounds[i]/rps))
			}
		}
		if len(rs) == 0 {
			return nil
		}
		res.RPSRatioRounds[n] = rs
		r := round3(medianF(rs))
		return &r
	}
	if r := ratio("reverseproxy"); r != nil {
		res.RatioReverseProxy = *r
	}
	res.RatioCaddy, res.RatioNginx, res.RatioHAProxy = ratio("caddy"), ratio("nginx"), ratio("haproxy")
	res.RatioNginxLua = ratio("nginx_lua")
	if peer, plain := res.Paths["nginx_lua"], res.Paths["nginx"]; peer != nil && plain != nil && len(peer.RPSC64Rounds) == len(plain.RPSC64Rounds) {
		var rs []float64
		for i, rps := range plain.RPSC64Rounds {
			if rps > 0 {
				rs = append(rs, peer.RPSC64Rounds[i]/rps)
			}
		}
		if len(rs) > 0 {
			r := round3(medianF(rs))
			res.NginxLuaVsNginx = &r
		}
	}
	cpuRatio := func(n string) *float64 {
		p := res.Paths[n]
		if p == nil || p.CPUUsPerRequestC64 == 0 || g.CPUUsPerRequestC64 == 0 {
			return nil
		}
		r := round3(p.CPUUsPerRequestC64 / g.CPUUsPerRequestC64)
		return &r
	}
	res.CPURatioReverseProxy, res.CPURatioNginx, res.CPURatioHAProxy = cpuRatio("reverseproxy"), cpuRatio("nginx"), cpuRatio("haproxy")
	res.CPURatioNginxLua = cpuRatio("nginx_lua")
	res.CPURatioRawProxy = cpuRatio("rawproxy")
	if r := ratio("rawproxy"); r != nil {
		res.RatioRawProxy = *r
	}
	if t := &b.tracing; len(t.slices) > 0 {
		var rps, p99 []float64
		for _, sl := range t.slices {
			rps, p99 = append(rps, sl.RPSRatio), append(p99, sl.P99Ratio)
		}
		res.TracingSlices = t.slices
		res.TracingRPSRatio = round3(medianF(rps))
		res.TracingP99RatioC64 = round3(medianF(p99))
		res.TracingCPUUsPerRequest = t.usPerRequest()
		if us := res.TracingCPUUsPerRequest; us[0] > 0 && us[1] > 0 {
			res.TracingCPURatio = round3(us[1] / us[0])
		}
	}
	// The proxy's CPU a request over the gateway's, as cpu_ratio_vs_nginx.
	proxyOverGateway := func(t *pairStats) (*float64, [2]float64) {
		us := t.usPerRequest()
		if us[0] == 0 || us[1] == 0 {
			return nil, us
		}
		r := round3(us[0] / us[1])
		return &r, us
	}
	res.CPURatioNginxAtOnce, res.CPUUsPerRequestNginxAtOnce = proxyOverGateway(&b.vsNginx)
	res.CPURatioHAProxyAtOnce, res.CPUUsPerRequestHAProxyAtOnce = proxyOverGateway(&b.vsHAProxy)
	res.CPURatioNginxLuaAtOnce, res.CPUUsPerRequestNginxLuaAtOnce = proxyOverGateway(&b.vsNginxLua)
	direct, gw, rp := &b.sse[0], &b.sse[1], &b.sse[2]
	res.SSEDirectTTFTP99Ms = percentile(direct.ttft, 0.99)
	res.SSEGatewayTTFTP99 = percentile(gw.ttft, 0.99)
	res.SSEAddedTTFTP99Ms = round3(res.SSEGatewayTTFTP99 - res.SSEDirectTTFTP99Ms)
	res.SSEReverseProxyTTFTP99Ms = percentile(rp.ttft, 0.99)
	res.SSEReverseProxyAddedTTFTP99Ms = round3(res.SSEReverseProxyTTFTP99Ms - res.SSEDirectTTFTP99Ms)
	res.SSEReverseProxyStalls = rp.stalls
	res.SSEStalls, res.SSEErrors, res.SSECompleted = gw.stalls, gw.errors, gw.completed
	res.SSEMaxGapMs = ms(gw.maxGap)
	res.Seconds = round3(time.Since(began).Seconds())
	met := func(r *float64, min float64) bool { return r != nil && *r >= min }
	res.TargetsMet = map[string]bool{
		"added_p99_c1_at_most_0.5ms":       res.AddedP99MsC1 <= 0.5,
		"rps_at_least_1x_reverseproxy":     res.RatioReverseProxy >= 1,
		"rps_at_least_1x_caddy":            met(res.RatioCaddy, 1),
		"rps_at_least_0.5x_nginx":          met(res.RatioNginx, 0.5),
		"rps_at_least_1x_nginx":            met(res.RatioNginx, 1),
		"rps_at_least_1x_haproxy":          met(res.RatioHAProxy, 1),
		"sse_added_ttft_p99_at_most_0.3ms": res.SSEAddedTTFTP99Ms <= 0.3,
		"sse_no_stalls":                    res.SSEStalls == 0 && res.SSEErrors == 0,
		"tracing_rps_at_least_0.97x":       res.TracingRPSRatio >= 0.97,
		"tracing_p99_c64_at_most_1.1x":     res.TracingP99RatioC64 > 0 && res.TracingP99RatioC64 <= 1.1,
	}
}

// sseStats is one path's streams, over all rounds.
type sseStats struct {
	mu                        sync.Mutex
	ttft                      []time.Duration
	maxGap                    time.Duration
	stalls, errors, completed int
}

// streams keeps sseStreams streams open at once for sseTime: every worker
// opens a stream, reads it to its end and opens the next, the workers'
// first starts spread over one stream's length.
func streams(ctx context.Context, client *http.Client, key, u string, st *sseStats) {
	streamLen := time.Duration(sseEvents-1) * sseEventGap
	end := time.Now().Add(sseTime)
	var wg sync.WaitGroup
	for w := range sseStreams {
		wg.Go(func() {
			time.Sleep(streamLen * time.Duration(w) / sseStreams)
			for time.Now().Before(end) {
				ttft, gap, ok, err := stream(ctx, client, key, u)
				st.mu.Lock()
				switch {
				case err != nil:
					st.errors++
				default:
					st.ttft = append(st.ttft, ttft)
					st.maxGap = max(st.maxGap, gap)
					if !ok || gap >= sseStall {
						st.stalls++
					} else {
						st.completed++
					}
				}
				st.mu.Unlock()
			}
		})
	}
	wg.Wait()
}

// stream reads one stream: time to the first event, the longest wait
// between two events, and whether all events and [DONE] came.
func stream(ctx context.Context, client *http.Client, key, u string) (time.Duration, time.Duration, bool, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, u, strings.NewReader(chatIn))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Authorization", "Bearer "+key)
	t0 := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return 0, 0, false, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, resp.Body)
		return 0, 0, false, fmt.Errorf("status %d", resp.StatusCode)
	}
	br := bufio.NewReader(resp.Body)
	var ttft, gap time.Duration
	last := t0
	events, done := 0, false
	for {
		line, err := br.ReadSlice('\n')
		if bytes.HasPrefix(line, []byte("data:")) {
			now := time.Now()
			if events == 0 {
				ttft = now.Sub(t0)
			} else {
				gap = max(gap, now.Sub(last))
			}
			last = now
			if bytes.Contains(line, []byte("[DONE]")) {
				done = true
			} else {
				events++
			}
		}
		if err != nil {
			break
		}
	}
	return ttft, gap, done && events == sseEvents, nil
}
