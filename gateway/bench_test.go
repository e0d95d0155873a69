package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"modelplane/bus"
	"modelplane/busapi"
	"modelplane/gateway"
	"modelplane/internal/natstest"
	"modelplane/internal/wait"
	"modelplane/tracing"
)

// The request path's benchmarks: the gateway with every feature the
// command's benchmark turns on (API key, schema validation, weighted split,
// sampling, statistics, metrics) against a bare httputil.ReverseProxy and
// the replica reached directly, over loopback, one request at a time.
// They are for profiling (-cpuprofile, -memprofile, -benchmem); the
// end-to-end figures come from `modelplane bench gateway`.

const (
	benchAnswer = `{"predictions":[{"label":"legit","score":0.12},{"label":"fraud","score":0.87}]}`
	benchSchema = `{"type":"object","required":["amount","country"],"additionalProperties":false,
 "properties":{"amount":{"type":"number","minimum":0},"country":{"type":"string","minLength":2,"maxLength":2}}}`
	benchChat = `{"messages":[{"role":"user","content":"hello"}],"max_tokens":16,"stream":true}`
)

// benchReplica answers predict at once and chat with 16 events at once.
func benchReplica() http.Handler {
	mux := http.NewServeMux()
	answer := []byte(benchAnswer)
	mux.HandleFunc("POST /predict", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(answer)))
		_, _ = w.Write(answer)
	})
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		for i := range 16 {
			fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"tok%d \"}}]}\n\n", i)
			_ = rc.Flush()
		}
		_, _ = io.WriteString(w, "data: [DONE]\n\n")
	})
	return mux
}

type benchSetup struct {
	gateway, reverseProxy, direct string
	key                           string
	handler                       http.Handler
}

func setupBench(b *testing.B) *benchSetup { return setupBenchTraced(b, tracing.Provider{}) }

// setupBenchTraced is setupBench with a gateway tracing as tp says.
func setupBenchTraced(b *testing.B, tp tracing.Provider) *benchSetup {
	b.Helper()
	ctx := b.Context()
	_, nc := natstest.Connect(b)
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	if err := bus.Ensure(ctx, js); err != nil {
		b.Fatal(err)
	}
	routes, err := js.KeyValue(ctx, busapi.BucketRoutes)
	if err != nil {
		b.Fatal(err)
	}
	keys, err := js.KeyValue(ctx, busapi.BucketKeys)
	if err != nil {
		b.Fatal(err)
	}
	var addrs []string
	for range 2 {
		s := httptest.NewServer(benchReplica())
		b.Cleanup(s.Close)
		addrs = append(addrs, strings.TrimPrefix(s.URL, "http://"))
	}
	versions := []busapi.RouteVersion{ver("stable", 90, addrs...), ver("canary", 10, addrs...)}
	for _, rt := range []busapi.Route{
		{Endpoint: "bench", Team: "bench", Task: "classification", Generation: 1, Versions: versions,
			InputSchema: json.RawMessage(benchSchema), FeatureNames: []string{"amount", "country"}, SamplingRate: 0.01},
		{Endpoint: "bench-chat", Team: "bench", Task: "llm", Generation: 1, Versions: versions, SamplingRate: 0.01},
	} {
		data, _ := json.Marshal(rt)
		if _, err := routes.Put(ctx, rt.Endpoint, data); err != nil {
			b.Fatal(err)
		}
	}
	id, secret := make([]byte, 6), make([]byte, 32)
	_, _ = rand.Read(id)
	_, _ = rand.Read(secret)
	prefix := "mpk_" + hex.EncodeToString(id)
	raw := prefix + "_" + base64.RawURLEncoding.EncodeToString(secret)
	sum := sha256.Sum256([]byte(raw))
	entry, _ := json.Marshal(busapi.KeyEntry{Prefix: prefix, SHA256: hex.EncodeToString(sum[:]), Team: "bench", Role: "engineer"})
	if _, err := keys.Put(ctx, prefix, entry); err != nil {
		b.Fatal(err)
	}
	g, err := gateway.New(gateway.Config{StateDir: b.TempDir(), KeyRPS: 1e9, KeyBurst: 1e9, EndpointRPS: 1e9, EndpointBurst: 1e9,
		MaxOutstandingPerReplica: 4096, StatsInterval: time.Second, Tracer: tp}, nc, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	if err := g.Start(ctx); err != nil {
		b.Fatal(err)
	}
	gs := serveH1(b, g.Handler(), nil)
	b.Cleanup(g.Stop)
	up, _ := url.Parse("http://" + addrs[0])
	rp := &httputil.ReverseProxy{Transport: &http.Transport{MaxIdleConnsPerHost: 512, DisableCompression: true}, FlushInterval: -1,
		Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(up) }, ErrorLog: log.New(io.Discard, "", 0)}
	rs := httptest.NewServer(rp)
	b.Cleanup(rs.Close)
	s := &benchSetup{gateway: gs, reverseProxy: rs.URL, direct: "http://" + addrs[0], key: raw, handler: g.Handler()}
	var st int
	wait.Eventually(b, 10*time.Second, func() bool {
		st, _ = benchPost(http.DefaultClient, s.gateway+predictPath("bench"), s.key, predictBody)
		return st == http.StatusOK
	}, "gateway never answered 200, last %v", wait.Show(func() any { return st }))
	return s
}

func benchPost(c *http.Client, u, key, body string) (int, error) {
	req, _ := http.NewRequest(http.MethodPost, u, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// BenchmarkPredict is one predict call at a time over loopback on each path.
func BenchmarkPredict(b *testing.B) {
	s := setupBench(b)
	for _, p := range []struct{ name, url string }{
		{"direct", s.direct + "/predict"},
		{"reverseproxy", s.reverseProxy + "/predict"},
		{"gateway", s.gateway + predictPath("bench")},
	} {
		b.Run(p.name, func(b *testing.B) {
			c := &http.Client{Transport: &http.Transport{DisableCompression: true}}
			for b.Loop() {
				if st, err := benchPost(c, p.url, s.key, predictBody); err != nil || st != http.StatusOK {
					b.Fatalf("status %d, %v", st, err)
				}
			}
		})
	}
}

// BenchmarkHandlerPredict calls the gateway's handler in process (the
// replica still over loopback), so that -benchmem counts the gateway's own
// allocations per request and no client's.
func BenchmarkHandlerPredict(b *testing.B) { handlerPredict(b, setupBench(b)) }

// BenchmarkHandlerPredictTraced is BenchmarkHandlerPredict with every
// request traced as modelplane gateway traces it (batched OTLP/HTTP to a
// sink that discards it), so that the difference is what tracing costs a
// request in allocations and CPU (-cpuprofile shows where).
func BenchmarkHandlerPredictTraced(b *testing.B) {
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.Copy(io.Discard, r.Body) }))
	b.Cleanup(sink.Close)
	b.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", sink.URL)
	tp, err := tracing.FromEnv(b.Context(), "bench")
	if err != nil || !tp.On {
		b.Fatalf("tracing %+v, %v; want on", tp, err)
	}
	b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	handlerPredict(b, setupBenchTraced(b, tp))
}

func handlerPredict(b *testing.B, s *benchSetup) {
	body := []byte(predictBody)
	path := predictPath("bench")
	auth := "Bearer " + s.key
	b.ReportAllocs()
	cpu0 := cpuTime()
	for b.Loop() {
		req := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", auth)
		w := httptest.NewRecorder()
		s.handler.ServeHTTP(w, req)
		if w.Code != http.StatusOK {
			b.Fatalf("status %d: %s", w.Code, w.Body)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
}

// cpuTime is the process's CPU time so far, user and system: the
// replica's and the exporting goroutine's included, as the handler's
// share of a core is what tracing must not grow.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkStreamTTFT opens one stream at a time and reports the time to
// its first event on each path.
func BenchmarkStreamTTFT(b *testing.B) {
	s := setupBench(b)
	for _, p := range []struct{ name, url string }{
		{"direct", s.direct + "/v1/chat/completions"},
		{"reverseproxy", s.reverseProxy + "/v1/chat/completions"},
		{"gateway", s.gateway + chatPath("bench-chat")},
	} {
		b.Run(p.name, func(b *testing.B) {
			c := &http.Client{Transport: &http.Transport{DisableCompression: true}}
			var ttft time.Duration
			for b.Loop() {
				req, _ := http.NewRequest(http.MethodPost, p.url, strings.NewReader(benchChat))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Accept", "text/event-stream")
				req.Header.Set("Authorization", "Bearer "+s.key)
				t0 := time.Now()
				resp, err := c.Do(req)
				if err != nil || resp.StatusCode != http.StatusOK {
					b.Fatalf("stream: %v", err)
				}
				br := bufio.NewReader(resp.Body)
				first := true
				for {
					line, err := br.ReadSlice('\n')
					if first && bytes.HasPrefix(line, []byte("data:")) {
						ttft += time.Since(t0)
						first = false
					}
					if err != nil {
						break
					}
				}
				resp.Body.Close()
			}
			b.ReportMetric(float64(ttft.Microseconds())/float64(b.N), "ttft-µs")
		})
	}
}
