package gateway_test

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/quartz"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"modelplane/bus"
	"modelplane/busapi"
	"modelplane/gateway"
	"modelplane/h1"
	"modelplane/internal/natstest"
	"modelplane/internal/wait"
	"modelplane/sim/replica"
)

// Replica profiles with latencies small enough for fast tests.
const (
	classifierProfile = `{"latency_ms":{"p50":1,"p99":3},"error_rate":0,"score":{"mean":0.3,"sd":0.2},"class_balance":{"legit":0.7,"fraud":0.3}}`
	llmProfile        = `{"prefill_ms_per_token":0.05,"decode_base_ms":2,"decode_ms_per_seq":0.1,"kv_mb_per_token":0.8,"usable_gb":13}`
)

// env is an embedded NATS with the contract's buckets.
type env struct {
	url    string
	nc     *nats.Conn
	routes jetstream.KeyValue
	keys   jetstream.KeyValue
}

func newEnv(t *testing.T) *env {
	t.Helper()
	s, nc := natstest.Connect(t)
	return setupEnv(t, s.ClientURL(), nc)
}

func setupEnv(t *testing.T, url string, nc *nats.Conn) *env {
	t.Helper()
	ctx := t.Context()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := bus.Ensure(ctx, js); err != nil {
		t.Fatal(err)
	}
	e := &env{url: url, nc: nc}
	if e.routes, err = js.KeyValue(ctx, busapi.BucketRoutes); err != nil {
		t.Fatal(err)
	}
	if e.keys, err = js.KeyValue(ctx, busapi.BucketKeys); err != nil {
		t.Fatal(err)
	}
	return e
}

// putRoute publishes a routing entry as the control plane's relay would.
func (e *env) putRoute(t *testing.T, rt busapi.Route) {
	t.Helper()
	b, err := json.Marshal(rt)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.routes.Put(t.Context(), rt.Endpoint, b); err != nil {
		t.Fatal(err)
	}
}

// newKey makes an API key of team (empty: org-wide) with role, publishes
// its digest and returns the key.
func (e *env) newKey(t *testing.T, team, role string, expires *time.Time) string {
	t.Helper()
	raw, prefix := makeKey(t)
	sum := sha256.Sum256([]byte(raw))
	b, err := json.Marshal(busapi.KeyEntry{Prefix: prefix, SHA256: hex.EncodeToString(sum[:]), Team: team, Role: role, ExpiresAt: expires})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.keys.Put(t.Context(), prefix, b); err != nil {
		t.Fatal(err)
	}
	return raw
}

// makeKey returns a key of the shape package auth makes, and its prefix.
func makeKey(t *testing.T) (raw, prefix string) {
	t.Helper()
	id := make([]byte, 6)
	secret := make([]byte, 32)
	_, _ = rand.Read(id)
	_, _ = rand.Read(secret)
	prefix = "mpk_" + hex.EncodeToString(id)
	return prefix + "_" + base64.RawURLEncoding.EncodeToString(secret), prefix
}

// gw is a running gateway behind a real HTTP server.
type gw struct {
	*gateway.Gateway
	url string
	// adminURL serves the admin handler (/metrics), as the admin listener does.
	adminURL string
}

// startGateway runs a gateway on nc; it is stopped when the test ends.
func startGateway(t *testing.T, nc *nats.Conn, cfg gateway.Config) *gw {
	t.Helper()
	if cfg.StateDir == "" {
		cfg.StateDir = t.TempDir()
	}
	g, err := gateway.New(cfg, nc, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	u := serveH1(t, g.Handler(), nil)
	admin := httptest.NewServer(g.AdminHandler())
	t.Cleanup(func() { admin.Close(); g.Stop() })
	return &gw{Gateway: g, url: u, adminURL: admin.URL}
}

// serveH1 serves h with h1, the server `modelplane gateway` runs, on ln
// (a new loopback listener when nil) until the test ends, and returns its
// URL.
func serveH1(t testing.TB, h http.Handler, ln net.Listener) string {
	t.Helper()
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
	}
	srv := &h1.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 120 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String()
}

// startReplica runs a sim replica and returns its address.
func startReplica(t *testing.T, version string, task replica.Task) string {
	t.Helper()
	_, addr := startReplicaServer(t, version, task)
	return addr
}

// startReplicaServer runs a sim replica and returns it and its address.
func startReplicaServer(t *testing.T, version string, task replica.Task) (*replica.Server, string) {
	t.Helper()
	profile := classifierProfile
	if task == replica.TaskLLM {
		profile = llmProfile
	}
	s, err := replica.New(replica.Config{ReplicaID: "r-" + version + "-" + rand.Text()[:6], Endpoint: "e", Version: version,
		Task: task, Profile: json.RawMessage(profile), Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	addr, err := s.Start(t.Context(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	wait.Eventually(t, 10*time.Second, s.Ready, "waiting for replica ready")
	return s, addr.String()
}

// deadAddr is a loopback address that refuses connections for the rest
// of the test: a socket bound to it and never listening holds the port,
// so a connection is refused and no other server can take the port
// meanwhile. (A port found free and let go was once taken by another
// test's server, which answered 404 where a refusal was expected.)
func deadAddr(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(sa.(*syscall.SockaddrInet4).Port))
}

// newClock is a gateway clock moved by hand (Config.Clock). It logs
// nothing: the request path reads it on every request.
func newClock(t *testing.T) *quartz.Mock {
	return quartz.NewMock(t).WithLogger(quartz.NoOpLogger)
}

// advance moves clk forward by d through every tick on the way (the
// statistics ticker's), each delivered before the next: Advance alone
// refuses to jump past one.
func advance(t *testing.T, clk *quartz.Mock, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for {
		next, ok := clk.Peek()
		if !ok || next > d {
			clk.Advance(d).MustWait(ctx)
			return
		}
		step, w := clk.AdvanceNext()
		w.MustWait(ctx)
		d -= step
	}
}

// result is one gateway answer.
type result struct {
	status int
	header http.Header
	body   []byte
}

// call POSTs body to the gateway with key (none when empty) and extra
// headers given as name, value pairs.
func call(t *testing.T, base, path, key, body string, hdr ...string) result {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	return result{status: resp.StatusCode, header: resp.Header, body: b}
}

const predictBody = `{"instances":[{"amount":12.5,"country":"DE"},{"amount":900,"country":"US"}]}`

func predictPath(endpoint string) string { return "/v1/endpoints/" + endpoint + "/predict" }
func chatPath(endpoint string) string    { return "/v1/endpoints/" + endpoint + "/chat/completions" }

// route is a one-version routing entry.
func route(endpoint, team, task string, gen int64, versions ...busapi.RouteVersion) busapi.Route {
	return busapi.Route{Endpoint: endpoint, Team: team, Task: task, Generation: gen, Versions: versions}
}

func ver(name string, weight int, addrs ...string) busapi.RouteVersion {
	v := busapi.RouteVersion{Name: name, Weight: weight, Replicas: []busapi.RouteReplica{}}
	for i, a := range addrs {
		v.Replicas = append(v.Replicas, busapi.RouteReplica{ID: name + "-" + string(rune('a'+i)), Addr: a})
	}
	return v
}

// publishedStats reads MP_REQSTATS from its start until it holds windows
// windows of endpoint versions, and returns them, failing the test on a
// message off busapi.ReqStatsBatchSubject, not a batch or whose
// Nats-Msg-Id is not its id.
func publishedStats(t *testing.T, nc *nats.Conn, windows int) []busapi.ReqStats {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	cons, err := js.OrderedConsumer(ctx, busapi.StreamReqStats, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	var out []busapi.ReqStats
	for len(out) < windows {
		msg, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatalf("after %d of %d windows: %v", len(out), windows, err)
		}
		b, err := busapi.DecodeReqStats(msg.Data())
		if msg.Subject() != busapi.ReqStatsBatchSubject || err != nil || len(b.Stats) == 0 ||
			msg.Headers().Get(jetstream.MsgIDHeader) != b.ID {
			t.Fatalf("message on %s with Nats-Msg-Id %q is no batch of statistics: %.300s", msg.Subject(), msg.Headers().Get(jetstream.MsgIDHeader), msg.Data())
		}
		out = append(out, b.Stats...)
	}
	return out
}
