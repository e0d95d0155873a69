package app

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
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

	"modelplane/agent/proto"
	"modelplane/bus"
	"modelplane/gateway"
)

// GatewayBenchResult is what `modelplane bench gateway` prints: the
// gateway's overhead against a replica that answers at once, reached
// directly, through the gateway with every feature on, through a bare
// httputil.ReverseProxy and through nginx, HAProxy and Caddy as plain
// proxies (DESIGN.md section 13).
type GatewayBenchResult struct {
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
	// The ratios are the gateway's rps over each proxy's, measured in the
	// same interleaved rounds; null where the proxy is not installed.
	RatioReverseProxy float64  `json:"rps_ratio_vs_reverseproxy"`
	RatioCaddy        *float64 `json:"rps_ratio_vs_caddy"`
	RatioNginx        *float64 `json:"rps_ratio_vs_nginx"`
	RatioHAProxy      *float64 `json:"rps_ratio_vs_haproxy"`
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
	// Paths holds every path's numbers; Skipped why a proxy was left out.
	Paths   map[string]*GatewayBenchPath `json:"paths"`
	Skipped map[string]string            `json:"skipped"`
	Rounds  int                          `json:"rounds"`
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
	// round; Profile+".sse" is its profile during that round's SSE phase.
	Profile    string          `json:"cpu_profile,omitempty"`
	TargetsMet map[string]bool `json:"targets_met"`
}

// GatewayBenchPath is one path's numbers, over all rounds.
type GatewayBenchPath struct {
	P50MsC1     float64 `json:"p50_ms_c1"`
	P99MsC1     float64 `json:"p99_ms_c1"`
	RPSC64      float64 `json:"rps_c64"`
	P99MsC64    float64 `json:"p99_ms_c64"`
	ErrorsC1    int     `json:"errors_c1"`
	ErrorsC64   int     `json:"errors_c64"`
	RequestsC1  int     `json:"requests_c1"`
	RequestsC64 int     `json:"requests_c64"`

	url    string
	c1     []time.Duration
	c64    []time.Duration
	c64Sec float64
}

const (
	gwBenchChildEnv  = "MP_BENCH_GATEWAY_CHILD"
	gwBenchNATSEnv   = "MP_BENCH_GATEWAY_NATS"
	gwBenchUpEnv     = "MP_BENCH_GATEWAY_UPSTREAM"
	gwBenchEndpoint  = "bench"
	gwBenchChat      = "bench-chat"
	gwBenchRounds    = 3
	gwBenchC1Time    = 3 * time.Second
	gwBenchC64Time   = 2 * time.Second
	gwBenchWarmup    = 300 * time.Millisecond
	gwBenchSSETime   = 4 * time.Second
	gwBenchStreams   = 512
	gwBenchEvents    = 16
	gwBenchEventGap  = 50 * time.Millisecond
	gwBenchStall     = 300 * time.Millisecond
	gwBenchPredictIn = `{"instances":[{"amount":12.5,"country":"DE"},{"amount":900,"country":"US"}]}`
	gwBenchPredict   = `{"predictions":[{"label":"legit","score":0.12},{"label":"fraud","score":0.87}]}`
	gwBenchChatIn    = `{"messages":[{"role":"user","content":"hello"}],"max_tokens":16,"stream":true}`
	gwBenchSchema    = `{"type":"object","required":["amount","country"],"additionalProperties":false,
 "properties":{"amount":{"type":"number","minimum":0},"country":{"type":"string","minLength":2,"maxLength":2}}}`
)

// runBenchGateway runs the benchmark, or, in the child processes it starts
// (pinned to their own core), the gateway or the bare reverse proxy.
func runBenchGateway(ctx context.Context, cfg BenchConfig, out io.Writer) error {
	if mode := os.Getenv(gwBenchChildEnv); mode != "" {
		return gwBenchChild(ctx, mode, out)
	}
	res, err := benchGateway(ctx, cfg)
	if err != nil {
		return err
	}
	if cfg.JSON {
		return json.NewEncoder(out).Encode(res)
	}
	_, err = fmt.Fprintf(out, "gateway: added p99 at c1 %.3f ms; %.0f req/s at c64 (%.2fx ReverseProxy); SSE %d streams added TTFT p99 %.3f ms, %d stalls\n",
		res.AddedP99MsC1, res.RPSC64, res.RatioReverseProxy, res.SSEStreams, res.SSEAddedTTFTP99Ms, res.SSEStalls)
	return err
}

// benchReplica answers predict with a fixed JSON at once and chat with a
// fixed stream of events.
func benchReplica() http.Handler {
	mux := http.NewServeMux()
	predict := []byte(gwBenchPredict)
	mux.HandleFunc("POST /predict", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(predict)))
		_, _ = w.Write(predict)
	})
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Cache-Control", "no-cache")
		rc := http.NewResponseController(w)
		for i := range gwBenchEvents {
			if i > 0 {
				select {
				case <-r.Context().Done():
					return
				case <-time.After(gwBenchEventGap):
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

// gwBenchChild serves the gateway or the bare reverse proxy on a free port,
// prints "addr control-addr gomaxprocs" and serves until stdin closes. The
// control address starts (/start?file=) and stops (/stop) a CPU profile.
func gwBenchChild(ctx context.Context, mode string, out io.Writer) error {
	var h http.Handler
	switch mode {
	case "gateway":
		// As `modelplane gateway` runs; the bare reverse proxy keeps Go's
		// default, so that it stays the bare floor.
		gateway.TuneGC()
		nc, err := nats.Connect(os.Getenv(gwBenchNATSEnv))
		if err != nil {
			return err
		}
		defer nc.Close()
		dir, err := os.MkdirTemp("", "mp-bench-gw-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		g, err := gateway.New(gateway.Config{StateDir: dir, KeyRPS: 1e9, KeyBurst: 1e9, EndpointRPS: 1e9, EndpointBurst: 1e9,
			MaxOutstandingPerReplica: 4096, StatsInterval: time.Second}, nc, slog.New(slog.DiscardHandler))
		if err != nil {
			return err
		}
		if err := g.Start(ctx); err != nil {
			return err
		}
		defer g.Stop()
		h = g.Handler()
	case "reverseproxy":
		up, err := url.Parse("http://" + os.Getenv(gwBenchUpEnv))
		if err != nil {
			return err
		}
		tr := &http.Transport{Proxy: nil, DialContext: (&net.Dialer{Timeout: time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConns: 4096, MaxIdleConnsPerHost: 4096, IdleConnTimeout: 90 * time.Second, DisableCompression: true}
		h = &httputil.ReverseProxy{Transport: tr, FlushInterval: -1, Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(up) }}
	default:
		return fmt.Errorf("unknown bench child %q", mode)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	ctl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	defer srv.Close()
	cmux := http.NewServeMux()
	var pf *os.File
	cmux.HandleFunc("/start", func(w http.ResponseWriter, r *http.Request) {
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
	cmux.HandleFunc("/stop", func(http.ResponseWriter, *http.Request) {
		if pf != nil {
			pprof.StopCPUProfile()
			pf.Close()
			pf = nil
		}
	})
	csrv := &http.Server{Handler: cmux, ReadHeaderTimeout: 10 * time.Second}
	go csrv.Serve(ctl)
	defer csrv.Close()
	if _, err := fmt.Fprintf(out, "%s %s %d\n", ln.Addr(), ctl.Addr(), runtime.GOMAXPROCS(0)); err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, os.Stdin)
	return nil
}

// gwBenchProc is a child process: one of ours or a proxy.
type gwBenchProc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
}

func (p *gwBenchProc) stop() {
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

// pinned prefixes argv with taskset -c core where taskset and pinning are
// available.
func gwPinned(pin bool, core string, argv ...string) []string {
	if !pin {
		return argv
	}
	return append([]string{"taskset", "-c", core}, argv...)
}

// startSelfChild starts this program as a bench child and reads its
// addresses.
func gwStartSelfChild(pin bool, env ...string) (*gwBenchProc, string, string, int, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, "", "", 0, err
	}
	argv := gwPinned(pin, "0", exe, "bench", "gateway")
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Env = slices.DeleteFunc(cmd.Env, func(s string) bool { return strings.HasPrefix(s, "GOMAXPROCS=") })
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, "", "", 0, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, "", "", 0, err
	}
	if err := cmd.Start(); err != nil {
		return nil, "", "", 0, err
	}
	p := &gwBenchProc{cmd: cmd, stdin: stdin}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		p.stop()
		return nil, "", "", 0, fmt.Errorf("bench child: %w", err)
	}
	f := strings.Fields(line)
	if len(f) != 3 {
		p.stop()
		return nil, "", "", 0, fmt.Errorf("bench child said %q", line)
	}
	n, _ := strconv.Atoi(f[2])
	return p, f[0], f[1], n, nil
}

func gwFreePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// startProxy writes a plain-proxy config for name in dir and starts it on a
// free port; a missing binary is errGWProxyMissing.
var errGWProxyMissing = errors.New("not installed")

func gwStartProxy(name, dir, upstream string, pin bool) (*gwBenchProc, string, error) {
	bin, err := exec.LookPath(name)
	if err != nil {
		if _, serr := os.Stat("/usr/sbin/" + name); serr != nil {
			return nil, "", errGWProxyMissing
		}
		bin = "/usr/sbin/" + name
	}
	port, err := gwFreePort()
	if err != nil {
		return nil, "", err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	pdir := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Join(pdir, "tmp"), 0o755); err != nil {
		return nil, "", err
	}
	var conf string
	var argv []string
	switch name {
	case "nginx":
		user := ""
		if os.Geteuid() == 0 {
			user = "user root;\n"
		}
		t := filepath.Join(pdir, "tmp")
		conf = user + `worker_processes 1;
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
  upstream replica { server ` + upstream + `; keepalive 1024; keepalive_requests 1000000; }
  server {
    listen ` + addr + `;
    location / {
      proxy_pass http://replica;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
    }
  }
}
`
		argv = []string{bin, "-e", pdir + "/error.log", "-p", pdir, "-c", filepath.Join(pdir, "proxy.conf")}
	case "haproxy":
		conf = `global
  maxconn 4000
  nbthread 1
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
`
		argv = []string{bin, "-db", "-f", filepath.Join(pdir, "proxy.conf")}
	case "caddy":
		conf = `{
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
`
		argv = []string{bin, "run", "--adapter", "caddyfile", "--config", filepath.Join(pdir, "proxy.conf")}
	}
	if err := os.WriteFile(filepath.Join(pdir, "proxy.conf"), []byte(conf), 0o644); err != nil {
		return nil, "", err
	}
	argv = gwPinned(pin, "0", argv...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = pdir
	cmd.Env = append(os.Environ(), "HOME="+pdir, "XDG_DATA_HOME="+pdir, "XDG_CONFIG_HOME="+pdir)
	var logBuf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logBuf, &logBuf
	// nginx's workers keep the output pipe open after their master ends.
	cmd.WaitDelay = time.Second
	if err := cmd.Start(); err != nil {
		return nil, "", err
	}
	p := &gwBenchProc{cmd: cmd}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond); err == nil {
			c.Close()
			return p, addr, nil
		}
		if time.Now().After(deadline) || (cmd.ProcessState != nil) {
			p.stop()
			return nil, "", fmt.Errorf("did not start: %s", strings.TrimSpace(logBuf.String()))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// gwBenchKey makes an API key of the shape package auth makes and its KV entry.
func gwBenchKey() (string, proto.KeyEntry) {
	id := make([]byte, 6)
	secret := make([]byte, 32)
	_, _ = rand.Read(id)
	_, _ = rand.Read(secret)
	prefix := "mpk_" + hex.EncodeToString(id)
	raw := prefix + "_" + base64.RawURLEncoding.EncodeToString(secret)
	sum := sha256.Sum256([]byte(raw))
	return raw, proto.KeyEntry{Prefix: prefix, SHA256: hex.EncodeToString(sum[:]), Team: "bench", Role: "engineer"}
}

func benchGateway(ctx context.Context, cfg BenchConfig) (GatewayBenchResult, error) {
	began := time.Now()
	res := GatewayBenchResult{Name: "gateway", Paths: map[string]*GatewayBenchPath{}, Skipped: map[string]string{}, Rounds: gwBenchRounds,
		Cores: runtime.NumCPU(), SSEStreams: gwBenchStreams, SSEEvents: gwBenchEvents,
		SSEEventGapMs: gwMs(gwBenchEventGap), SSEStallMs: gwMs(gwBenchStall)}
	dir, err := os.MkdirTemp("", "mp-bench-gw-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	_ = os.Chmod(dir, 0o755)

	// Pin: proxies and the gateway on core 0, this process (load generator,
	// replica, NATS) on the others.
	_, tsErr := exec.LookPath("taskset")
	pin := tsErr == nil && runtime.NumCPU() >= 2
	if pin {
		others := fmt.Sprintf("1-%d", runtime.NumCPU()-1)
		if err := exec.Command("taskset", "-a", "-p", "-c", others, strconv.Itoa(os.Getpid())).Run(); err != nil {
			pin = false
		} else {
			runtime.GOMAXPROCS(runtime.NumCPU() - 1)
		}
	}
	res.Pinned = pin
	res.GOMAXPROCS = runtime.GOMAXPROCS(0)

	// The replica: two listeners, so each version has two replicas.
	var replicaAddrs []string
	for range 2 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return res, err
		}
		srv := &http.Server{Handler: benchReplica(), ReadHeaderTimeout: 10 * time.Second}
		go srv.Serve(ln)
		defer srv.Close()
		replicaAddrs = append(replicaAddrs, ln.Addr().String())
	}
	direct := replicaAddrs[0]

	// NATS with the contract's buckets and streams, the route and the key.
	ns, err := bus.StartEmbedded(filepath.Join(dir, "nats"))
	if err != nil {
		return res, err
	}
	defer ns.Shutdown()
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		return res, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return res, err
	}
	if err := bus.Ensure(ctx, js); err != nil {
		return res, err
	}
	routes, err := js.KeyValue(ctx, proto.BucketRoutes)
	if err != nil {
		return res, err
	}
	keys, err := js.KeyValue(ctx, proto.BucketKeys)
	if err != nil {
		return res, err
	}
	versions := func() []proto.RouteVersion {
		var vs []proto.RouteVersion
		for i, name := range []string{"stable", "canary"} {
			v := proto.RouteVersion{Name: name, Weight: []int{90, 10}[i]}
			for j, a := range replicaAddrs {
				v.Replicas = append(v.Replicas, proto.RouteReplica{ID: fmt.Sprintf("%s-%d", name, j), Addr: a})
			}
			vs = append(vs, v)
		}
		return vs
	}
	for _, rt := range []proto.Route{
		{Endpoint: gwBenchEndpoint, Team: "bench", Task: "classification", Generation: 1, Versions: versions(),
			InputSchema: json.RawMessage(gwBenchSchema), FeatureNames: []string{"amount", "country"}, SamplingRate: 0.01},
		{Endpoint: gwBenchChat, Team: "bench", Task: "llm", Generation: 1, Versions: versions(), SamplingRate: 0.01},
	} {
		b, _ := json.Marshal(rt)
		if _, err := routes.Put(ctx, rt.Endpoint, b); err != nil {
			return res, err
		}
	}
	key, entry := gwBenchKey()
	b, _ := json.Marshal(entry)
	if _, err := keys.Put(ctx, entry.Prefix, b); err != nil {
		return res, err
	}

	// The gateway and the bare reverse proxy, each its own process.
	gw, gwAddr, gwCtl, gwProcs, err := gwStartSelfChild(pin, gwBenchChildEnv+"=gateway", gwBenchNATSEnv+"="+ns.ClientURL())
	if err != nil {
		return res, fmt.Errorf("gateway: %w", err)
	}
	defer gw.stop()
	res.GatewayGOMAXPROCS = gwProcs
	rp, rpAddr, _, _, err := gwStartSelfChild(pin, gwBenchChildEnv+"=reverseproxy", gwBenchUpEnv+"="+direct)
	if err != nil {
		return res, fmt.Errorf("reverse proxy: %w", err)
	}
	defer rp.stop()

	res.Paths["direct"] = &GatewayBenchPath{url: "http://" + direct + "/predict"}
	res.Paths["gateway"] = &GatewayBenchPath{url: "http://" + gwAddr + "/v1/endpoints/" + gwBenchEndpoint + "/predict"}
	res.Paths["reverseproxy"] = &GatewayBenchPath{url: "http://" + rpAddr + "/predict"}
	for _, name := range []string{"nginx", "haproxy", "caddy"} {
		p, addr, err := gwStartProxy(name, dir, direct, pin)
		if err != nil {
			res.Skipped[name] = err.Error()
			continue
		}
		defer p.stop()
		res.Paths[name] = &GatewayBenchPath{url: "http://" + addr + "/predict"}
	}
	order := []string{"direct", "gateway", "reverseproxy", "nginx", "haproxy", "caddy"}
	order = slices.DeleteFunc(order, func(n string) bool { return res.Paths[n] == nil })

	tr := &http.Transport{Proxy: nil, MaxIdleConns: 8192, MaxIdleConnsPerHost: 4096, IdleConnTimeout: 90 * time.Second,
		DisableCompression: true, DialContext: (&net.Dialer{Timeout: 5 * time.Second}).DialContext}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	do := func(u, body string) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, u, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: status %d", u, resp.StatusCode)
		}
		return nil
	}
	// Wait until every path answers (the gateway loads its table and key).
	for _, n := range order {
		deadline := time.Now().Add(15 * time.Second)
		for {
			err := do(res.Paths[n].url, gwBenchPredictIn)
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				return res, fmt.Errorf("%s never answered: %w", n, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}

	var paired []time.Duration
	var sseDirect, sseGW, sseRP gwSSEStats
	for round := range gwBenchRounds {
		rot := append(slices.Clone(order[round%len(order):]), order[:round%len(order)]...)
		// c1: every path in turn, so all see the same moments.
		end := time.Now().Add(gwBenchC1Time)
		for time.Now().Before(end) {
			var dDirect, dGW time.Duration
			for _, n := range rot {
				p := res.Paths[n]
				t0 := time.Now()
				err := do(p.url, gwBenchPredictIn)
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
				paired = append(paired, dGW-dDirect)
			}
		}
		// c64: each path alone for a while.
		for _, n := range rot {
			p := res.Paths[n]
			profile := n == "gateway" && round == gwBenchRounds-1 && cfg.Profile != ""
			if profile {
				abs, _ := filepath.Abs(cfg.Profile)
				if err := do("http://"+gwCtl+"/start?file="+url.QueryEscape(abs), ""); err != nil {
					return res, fmt.Errorf("start profile: %w", err)
				}
				res.Profile = abs
			}
			lat, errs, secs := gwBenchLoad(p.url, 64, do)
			if profile {
				_ = do("http://"+gwCtl+"/stop", "")
			}
			p.c64 = append(p.c64, lat...)
			p.ErrorsC64 += errs
			p.c64Sec += secs
		}
		// SSE: direct, through the gateway and through the bare reverse
		// proxy (the floor of a net/http proxy), rotating which goes first.
		sseURLs := [3]string{"http://" + direct + "/v1/chat/completions", "http://" + gwAddr + "/v1/endpoints/" + gwBenchChat + "/chat/completions",
			"http://" + rpAddr + "/v1/chat/completions"}
		sseOut := [3]*gwSSEStats{&sseDirect, &sseGW, &sseRP}
		for i := range 3 {
			k := (i + round) % 3
			profile := k == 1 && round == gwBenchRounds-1 && cfg.Profile != ""
			if profile {
				abs, _ := filepath.Abs(cfg.Profile + ".sse")
				if err := do("http://"+gwCtl+"/start?file="+url.QueryEscape(abs), ""); err != nil {
					return res, fmt.Errorf("start profile: %w", err)
				}
			}
			gwBenchSSE(ctx, client, key, sseURLs[k], sseOut[k])
			if profile {
				_ = do("http://"+gwCtl+"/stop", "")
			}
		}
	}

	for _, p := range res.Paths {
		p.RequestsC1, p.RequestsC64 = len(p.c1), len(p.c64)
		p.P50MsC1, p.P99MsC1 = percentile(p.c1, 0.50), percentile(p.c1, 0.99)
		p.P99MsC64 = percentile(p.c64, 0.99)
		if p.c64Sec > 0 {
			p.RPSC64 = float64(len(p.c64)) / p.c64Sec
		}
	}
	g := res.Paths["gateway"]
	res.AddedP99MsC1 = round3(g.P99MsC1 - res.Paths["direct"].P99MsC1)
	res.AddedP99PairedMsC1 = round3(percentile(paired, 0.99))
	res.RPSC64 = float64(int(g.RPSC64))
	ratio := func(n string) *float64 {
		p := res.Paths[n]
		if p == nil || p.RPSC64 == 0 {
			return nil
		}
		r := round3(g.RPSC64 / p.RPSC64)
		return &r
	}
	if r := ratio("reverseproxy"); r != nil {
		res.RatioReverseProxy = *r
	}
	res.RatioCaddy, res.RatioNginx, res.RatioHAProxy = ratio("caddy"), ratio("nginx"), ratio("haproxy")
	res.SSEDirectTTFTP99Ms = percentile(sseDirect.ttft, 0.99)
	res.SSEGatewayTTFTP99 = percentile(sseGW.ttft, 0.99)
	res.SSEAddedTTFTP99Ms = round3(res.SSEGatewayTTFTP99 - res.SSEDirectTTFTP99Ms)
	res.SSEReverseProxyTTFTP99Ms = percentile(sseRP.ttft, 0.99)
	res.SSEReverseProxyAddedTTFTP99Ms = round3(res.SSEReverseProxyTTFTP99Ms - res.SSEDirectTTFTP99Ms)
	res.SSEReverseProxyStalls = sseRP.stalls
	res.SSEStalls, res.SSEErrors, res.SSECompleted = sseGW.stalls, sseGW.errors, sseGW.completed
	res.SSEMaxGapMs = gwMs(sseGW.maxGap)
	res.Seconds = round3(time.Since(began).Seconds())
	met := func(r *float64, min float64) bool { return r != nil && *r >= min }
	res.TargetsMet = map[string]bool{
		"added_p99_c1_at_most_0.5ms":       res.AddedP99MsC1 <= 0.5,
		"rps_at_least_1x_reverseproxy":     res.RatioReverseProxy >= 1,
		"rps_at_least_1x_caddy":            met(res.RatioCaddy, 1),
		"rps_at_least_0.5x_nginx":          met(res.RatioNginx, 0.5),
		"sse_added_ttft_p99_at_most_0.3ms": res.SSEAddedTTFTP99Ms <= 0.3,
		"sse_no_stalls":                    res.SSEStalls == 0 && res.SSEErrors == 0,
	}
	return res, nil
}

// gwBenchLoad drives url with n concurrent clients for gwBenchC64Time after
// an unmeasured warm-up and returns the latencies, errors and seconds.
func gwBenchLoad(u string, n int, do func(u, body string) error) ([]time.Duration, int, float64) {
	start := time.Now().Add(gwBenchWarmup)
	end := start.Add(gwBenchC64Time)
	var mu sync.Mutex
	var all []time.Duration
	var errs atomic.Int64
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			mine := make([]time.Duration, 0, 4096)
			for {
				t0 := time.Now()
				if !t0.Before(end) {
					break
				}
				err := do(u, gwBenchPredictIn)
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
	return all, int(errs.Load()), time.Since(start).Seconds()
}

type gwSSEStats struct {
	mu                        sync.Mutex
	ttft                      []time.Duration
	maxGap                    time.Duration
	stalls, errors, completed int
}

// gwBenchSSE keeps gwBenchStreams streams open at once for gwBenchSSETime:
// every worker opens a stream, reads it to its end and opens the next, the
// workers' first starts spread over one stream's length.
func gwBenchSSE(ctx context.Context, client *http.Client, key, u string, st *gwSSEStats) {
	streamLen := time.Duration(gwBenchEvents-1) * gwBenchEventGap
	end := time.Now().Add(gwBenchSSETime)
	var wg sync.WaitGroup
	for w := range gwBenchStreams {
		wg.Go(func() {
			time.Sleep(streamLen * time.Duration(w) / gwBenchStreams)
			for time.Now().Before(end) {
				ttft, gap, ok, err := gwBenchStream(ctx, client, key, u)
				st.mu.Lock()
				switch {
				case err != nil:
					st.errors++
				default:
					st.ttft = append(st.ttft, ttft)
					st.maxGap = max(st.maxGap, gap)
					if !ok || gap >= gwBenchStall {
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

// gwBenchStream reads one stream: time to the first event, the longest wait
// between two events, and whether all events and [DONE] came.
func gwBenchStream(ctx context.Context, client *http.Client, key, u string) (time.Duration, time.Duration, bool, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, u, strings.NewReader(gwBenchChatIn))
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
	return ttft, gap, done && events == gwBenchEvents, nil
}

func gwMs(d time.Duration) float64 { return round3(float64(d) / float64(time.Millisecond)) }

// round3 rounds to three decimals (microseconds of a millisecond figure).
func round3(f float64) float64 { return math.Round(f*1000) / 1000 }
