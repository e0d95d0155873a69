package gateway

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/quartz"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"

	"modelplane/busapi"
	"modelplane/tracing"
)

// Defaults of Config.
const (
	DefaultMaxBodyBytes = 1 << 20
	DefaultTimeout      = 60 * time.Second
	DefaultStallTimeout = 2 * time.Second
	DefaultReadTimeout  = 30 * time.Second
	DefaultStreamBuffer = 64
	DefaultRetryAfter   = time.Second
	// DefaultMaxOutstandingPerReplica is the load-shedding bound the
	// command uses unless told otherwise (Config's zero turns it off).
	DefaultMaxOutstandingPerReplica = 64
)

// Config configures a Gateway.
type Config struct {
	// StateDir keeps the last good snapshot; required.
	StateDir string
	// MaxBodyBytes limits request bodies (413 beyond).
	MaxBodyBytes int64
	// Timeout bounds a request from the gateway's first byte upstream to
	// the end of a plain answer, or to the first byte of a stream, for the
	// endpoints whose route has no timeout of its own (TimeoutMS 0).
	Timeout time.Duration
	// StallTimeout is how long a streaming client may take to accept one
	// event before the stream is cut and the upstream generation cancelled.
	StallTimeout time.Duration
	// ReadTimeout bounds reading a request, headers and body, so a caller
	// who withholds the body cannot hold a connection; it is lifted once the
	// body is in, so a long or streamed answer is not cut (default 30s).
	ReadTimeout time.Duration
	// StreamBuffer is how many events may wait for a slow streaming client.
	StreamBuffer int
	// RetryAfter is the hint sent with 503 when no replica is ready.
	RetryAfter time.Duration
	// Clock is the gateway's time for key expiry, token checks, rate
	// limit buckets, wake throttling, replica ejection and the statistics
	// windows and their ticker, so that tests move it by hand. Latencies,
	// request timeouts and NATS retries are wall-clock time: they time
	// real I/O. quartz.NewReal() when nil.
	Clock quartz.Clock
	// Transport reaches the replicas; a tuned shared one when nil.
	Transport http.RoundTripper
	// ReplicaTLS, when set, is how replicas are reached: over https,
	// their certificates verified against its RootCAs (MP_GATEWAY_REPLICA_CA).
	// Every replica must then serve TLS (its node's MP_TLS_CERT), its
	// certificate naming the host of its address, or the server name its
	// route entry gives (busapi.RouteReplica.ServerName: a Kubernetes
	// pool's pods). It is the default transport's TLS configuration; a
	// Transport given is used as it is, for every replica.
	ReplicaTLS *tls.Config
	// ClientTrustDomain is the SPIFFE trust domain of the client
	// certificates the gateway's listener verified
	// (MP_GATEWAY_CLIENT_TRUST_DOMAIN): a certificate naming
	// spiffe://<it>/team/<team>/sa/<name> authenticates as the team's
	// active key named <name> (service.go). Empty: client certificates
	// authenticate nobody, and a request carrying one is refused.
	ClientTrustDomain string
	// Tracer traces each request (ml_serving.request and its steps,
	// trace.go, through Tracer.Requests; its children through the SDK)
	// and carries the trace to the replica; the zero value traces nothing
	// (a request without a traceparent then pays nothing for tracing) but
	// still passes a caller's traceparent on.
	Tracer tracing.Provider
	// ID names this gateway in its request statistics, whose message ids
	// it starts; unique among gateways. Default: host name and a random
	// suffix.
	ID string
	// StatsInterval is how often request statistics per endpoint and
	// version are published to MP_REQSTATS; DefaultStatsInterval when 0.
	StatsInterval time.Duration
	// KeyRPS and KeyBurst bound each API key's requests with a token
	// bucket: KeyRPS per second, bursts of KeyBurst (the rate rounded up
	// when 0). KeyRPS 0 is unlimited.
	KeyRPS   float64
	KeyBurst int
	// EndpointRPS and EndpointBurst do the same for each endpoint, across
	// all callers, unless its route has a rate limit of its own
	// (RateLimitRPS), which replaces them.
	EndpointRPS   float64
	EndpointBurst int
	// MaxOutstandingPerReplica sheds load: when every ready replica of the
	// chosen version already has this many requests outstanding at this
	// gateway, the request gets 429 instead of queueing. 0 turns it off.
	MaxOutstandingPerReplica int64
	// ShadowWorkers bounds the mirrored requests in flight to shadow
	// versions; beyond it copies are dropped and counted.
	// DefaultShadowWorkers when 0.
	ShadowWorkers int
	// EjectFailures is how many failed calls in a row (connect errors,
	// 5xx) eject a replica for EjectCooldown; DefaultEjectFailures and
	// DefaultEjectCooldown when 0, never when EjectFailures is negative.
	EjectFailures int
	EjectCooldown time.Duration
	// HoldQueue is how many requests of one endpoint scaled to zero may
	// wait at this gateway for a replica to start, each up to the
	// endpoint's cold-start budget; more get 202 at once. DefaultHoldQueue
	// when 0; negative holds none (every such request gets 202 at once).
	HoldQueue int
	// QuotaGateways is how many gateways share grants' daily quotas: each
	// reserves a chunk of 5 % of a quota divided by it, so a quota holds
	// within 5 % while at most this many gateways serve the endpoint
	// (docs/sharing.md). DefaultQuotaGateways when 0.
	QuotaGateways int
	// GraphIntn picks a graph splitter's branch, a number in [0, n), so
	// that tests choose it; math/rand/v2's IntN when nil.
	GraphIntn func(n int) int
}

func (c *Config) defaults() {
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.ReadTimeout == 0 {
		c.ReadTimeout = DefaultReadTimeout
	}
	if c.StallTimeout == 0 {
		c.StallTimeout = DefaultStallTimeout
	}
	if c.StreamBuffer == 0 {
		c.StreamBuffer = DefaultStreamBuffer
	}
	if c.RetryAfter == 0 {
		c.RetryAfter = DefaultRetryAfter
	}
	if c.Clock == nil {
		c.Clock = quartz.NewReal()
	}
	if c.ShadowWorkers == 0 {
		c.ShadowWorkers = DefaultShadowWorkers
	}
	if c.EjectFailures == 0 {
		c.EjectFailures = DefaultEjectFailures
	}
	if c.EjectCooldown == 0 {
		c.EjectCooldown = DefaultEjectCooldown
	}
	if c.StatsInterval == 0 {
		c.StatsInterval = DefaultStatsInterval
	}
	if c.HoldQueue == 0 {
		c.HoldQueue = DefaultHoldQueue
	}
	if c.QuotaGateways == 0 {
		c.QuotaGateways = DefaultQuotaGateways
	}
	if c.ID == "" {
		host, _ := os.Hostname()
		c.ID = host + "-" + rand.Text()[:8]
	}
}

// Validate names every bad setting.
func (c *Config) Validate() error {
	var errs []error
	if c.StateDir == "" {
		errs = append(errs, errors.New("state dir is required"))
	}
	if c.MaxBodyBytes < 0 {
		errs = append(errs, errors.New("max body bytes must not be negative"))
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"timeout", c.Timeout}, {"stall timeout", c.StallTimeout}, {"read timeout", c.ReadTimeout}, {"retry after", c.RetryAfter}, {"stats interval", c.StatsInterval}, {"eject cooldown", c.EjectCooldown}} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("%s must not be negative", d.name))
		}
	}
	for _, n := range []struct {
		name string
		v    float64
	}{{"key rps", c.KeyRPS}, {"key burst", float64(c.KeyBurst)}, {"endpoint rps", c.EndpointRPS},
		{"endpoint burst", float64(c.EndpointBurst)}, {"max outstanding per replica", float64(c.MaxOutstandingPerReplica)}} {
		if n.v < 0 || math.IsNaN(n.v) || math.IsInf(n.v, 0) {
			errs = append(errs, fmt.Errorf("%s must be a finite number, not negative", n.name))
		}
	}
	if c.QuotaGateways < 0 {
		errs = append(errs, errors.New("quota gateways must not be negative"))
	}
	if c.ShadowWorkers < 0 {
		errs = append(errs, errors.New("shadow workers must not be negative"))
	}
	if c.StreamBuffer < 0 {
		errs = append(errs, errors.New("stream buffer must not be negative"))
	}
	return errors.Join(errs...)
}

// NewTransport returns the transport the gateway uses for replicas: pooled
// keep-alive connections, no compression (bodies pass through as they are)
// and a short dial timeout, so that a dead replica is retried elsewhere fast.
func NewTransport() *http.Transport {
	return newTransport(nil)
}

// newTransport is NewTransport speaking TLS with tc (nil: plain).
func newTransport(tc *tls.Config) *http.Transport {
	d := &net.Dialer{Timeout: 2 * time.Second, KeepAlive: 30 * time.Second}
	return &http.Transport{
		TLSClientConfig:       tc,
		TLSHandshakeTimeout:   2 * time.Second,
		DialContext:           d.DialContext,
		MaxIdleConns:          4096,
		MaxIdleConnsPerHost:   512,
		IdleConnTimeout:       90 * time.Second,
		DisableCompression:    true,
		ExpectContinueTimeout: 0,
		WriteBufferSize:       32 << 10,
		ReadBufferSize:        32 << 10,
	}
}

// Gateway serves inference requests from the routing table and key digests
// it watches in NATS. Build it with New, run it with Start, end it with Stop.
type Gateway struct {
	cfg       Config
	nc        *nats.Conn
	js        jetstream.JetStream
	log       *slog.Logger
	transport http.RoundTripper
	// named are the transports of replicas with a server name (servername.go).
	named namedTransports
	// unary calls replicas for answers that are not streams (unary.go);
	// nil with ReplicaTLS or a Transport given in Config.
	unary *unaryClient
	// scheme is how replicas are called: "https://" with ReplicaTLS.
	scheme   string
	tracer   trace.Tracer
	requests *tracing.Recorder // nil: no request spans
	snapPath string

	routes   atomic.Pointer[routeTable]
	keys     atomic.Pointer[keyTable]
	identity atomic.Pointer[identityTable]
	ready    atomic.Bool

	// mu serialises writers of routes and keys (the watchers and the
	// loader); readers never take it.
	mu sync.Mutex
	// synced records which buckets have delivered their full content since
	// start, for readiness.
	routesSynced, keysSynced bool

	save chan struct{}

	// keyLimit holds the API keys' token buckets; nil when unlimited. An
	// endpoint's bucket is in its route.
	keyLimit *limiter

	// bg outlives requests: mirrored calls run under it and end when the
	// gateway stops. shadowSlots bounds them.
	bg          context.Context
	bgCancel    context.CancelFunc
	shadowSlots chan struct{}
	shadowWG    sync.WaitGroup
	// shadowSent and shadowDropped count mirrored requests sent and
	// dropped (workers busy, no ready shadow replica).
	shadowSent, shadowDropped atomic.Uint64

	stats   *statsRecorder
	samples *sampler
	metrics *metrics
	wakes   waker   // wake requests of endpoints scaled to zero (wake.go)
	holds   *holds  // requests waiting for them (hold.go)
	quotas  *quotas // grants' daily quotas (grant.go)

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// New checks cfg, prepares the state directory and loads the last good
// snapshot when there is one. It starts nothing. nc may be disconnected (or
// still connecting); the watchers retry.
func New(cfg Config, nc *nats.Conn, log *slog.Logger) (*Gateway, error) {
	cfg.defaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("gateway config: %w", err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("gateway state dir: %w", err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("gateway jetstream: %w", err)
	}
	g := &Gateway{cfg: cfg, nc: nc, js: js, log: log, transport: cfg.Transport,
		snapPath: snapshotPath(cfg.StateDir), save: make(chan struct{}, 1)}
	if g.transport == nil {
		g.transport = newTransport(cfg.ReplicaTLS)
		if cfg.ReplicaTLS == nil {
			g.unary = newUnaryClient(cfg.Clock)
		}
	}
	g.scheme = "http://"
	if cfg.ReplicaTLS != nil {
		g.scheme = "https://"
	}
	g.tracer, g.requests = tracerOf(cfg.Tracer.TracerProvider), cfg.Tracer.Requests
	g.keyLimit = newLimiter(cfg.KeyRPS, cfg.KeyBurst)
	g.bg, g.bgCancel = context.WithCancel(context.Background())
	g.shadowSlots = make(chan struct{}, cfg.ShadowWorkers)
	g.stats = newStatsRecorder(cfg.ID, cfg.StatsInterval, cfg.Clock, js, log)
	g.samples = newSampler(js, log, cfg.ID, sampleQueue)
	g.holds = newHolds(cfg.HoldQueue)
	g.quotas = newQuotas(js, cfg.QuotaGateways)
	g.metrics = newMetrics(g)
	g.routes.Store(&routeTable{byName: map[string]*route{}})
	g.keys.Store(newKeyTable(map[string]*key{}))
	g.identity.Store(&identityTable{members: map[string]*busapi.MemberEntry{}})
	if err := g.loadSnapshot(); err != nil {
		// A damaged snapshot is not fatal: NATS has the truth.
		log.Warn("gateway snapshot unreadable; waiting for NATS", slog.String("path", g.snapPath), slog.String("error", err.Error()))
	}
	return g, nil
}

// Start begins watching the routing table and the key digests. It returns at
// once; the gateway serves from the loaded snapshot until NATS answers.
func (g *Gateway) Start(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	g.cancel = cancel
	// The first window starts now: the ticker exists when Start returns,
	// so a test's clock advanced after Start always ends it.
	tick := g.cfg.Clock.NewTicker(g.stats.interval, "gateway", "stats")
	g.wg.Add(6)
	go func() { defer g.wg.Done(); g.stats.run(ctx, tick) }()
	go func() { defer g.wg.Done(); g.samples.run(ctx) }()
	go func() { defer g.wg.Done(); g.watchLoop(ctx, bucketRoutes) }()
	go func() { defer g.wg.Done(); g.watchLoop(ctx, bucketKeys) }()
	go func() { defer g.wg.Done(); g.watchLoop(ctx, bucketIdentity) }()
	go func() { defer g.wg.Done(); g.saveLoop(ctx) }()
	return nil
}

// Stop ends the watchers and writes the snapshot a last time.
func (g *Gateway) Stop() {
	if g.cancel != nil {
		g.cancel()
	}
	g.wg.Wait()
	g.bgCancel()
	g.shadowWG.Wait()
	// The last window is published, so that a stopped gateway's requests
	// are counted too.
	fctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	g.stats.flush(fctx)
	cancel()
	if g.ready.Load() {
		if err := g.writeSnapshot(); err != nil {
			g.log.Warn("gateway snapshot", slog.String("error", err.Error()))
		}
	}
	if t, ok := g.transport.(interface{ CloseIdleConnections() }); ok {
		t.CloseIdleConnections()
	}
	g.named.closeIdle()
	if g.unary != nil {
		g.unary.close()
	}
}

// now is the gateway's clock reading.
func (g *Gateway) now() time.Time { return g.cfg.Clock.Now() }

// Stats returns the request statistics publisher's counters.
func (g *Gateway) Stats() StatsCounters { return g.stats.counters() }

// ShadowCounters are the shadow mirror's running totals.
type ShadowCounters struct {
	// Mirrored is the number of copies sent to a shadow replica.
	Mirrored uint64
	// Dropped is the number of copies given up: every shadow worker busy,
	// or no ready replica of the shadow version.
	Dropped uint64
	// InFlight is the number of copies drawn and not finished yet.
	InFlight int
}

// Shadows returns the shadow mirror's counters.
func (g *Gateway) Shadows() ShadowCounters {
	return ShadowCounters{Mirrored: g.shadowSent.Load(), Dropped: g.shadowDropped.Load(), InFlight: len(g.shadowSlots)}
}

// Samples returns the prediction sampler's counters.
func (g *Gateway) Samples() SampleCounters { return g.samples.counters() }

// RouteGeneration is the generation of the routing entry the gateway serves
// endpoint from, and false while it holds none. The table is swapped
// atomically, so every request that starts after this returns g is routed
// by generation g or a later one: benchmarks time propagation with it.
func (g *Gateway) RouteGeneration(endpoint string) (int64, bool) {
	rt := g.routes.Load().byName[endpoint]
	if rt == nil {
		return 0, false
	}
	return rt.src.Generation, true
}

// RouteReplicas is the number of replicas, of all its versions, the
// gateway routes endpoint to; 0 while it holds no entry.
func (g *Gateway) RouteReplicas(endpoint string) int {
	rt := g.routes.Load().byName[endpoint]
	if rt == nil {
		return 0
	}
	n := 0
	for _, v := range rt.versions {
		n += len(v.upstreams)
	}
	return n
}

// Ready reports whether the gateway has a routing table to serve from: one
// loaded from NATS or from its snapshot on disk.
func (g *Gateway) Ready() bool { return g.ready.Load() }

// AdminHandler serves what only operators may read, on the admin listener
// (MP_GATEWAY_ADMIN_ADDR, loopback by default): /metrics, whose labels name
// every team's endpoints and versions, beside the health checks. The public
// Handler has no /metrics and answers 404 there.
func (g *Gateway) AdminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", healthz)
	mux.HandleFunc("GET /readyz", g.readyz)
	mux.Handle("GET /metrics", g.metrics.handler())
	return mux
}

func healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write([]byte("ok\n"))
}

// readyz answers 503 until the gateway has a routing table to serve from.
func (g *Gateway) readyz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if !g.Ready() {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte("no routing table yet\n"))
		return
	}
	_, _ = w.Write([]byte("ready\n"))
}

// Handler is the gateway's HTTP interface.
func (g *Gateway) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", healthz)
	mux.HandleFunc("GET /readyz", g.readyz)
	for _, er := range endpointRoutes {
		mux.HandleFunc(er.pattern, func(w http.ResponseWriter, r *http.Request) {
			g.inferenceCall(er.kind, false, r.PathValue("endpoint"), w, r)
		})
	}
	// The OpenAI routes (openai.go): the body's model is the endpoint.
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) { g.inferenceCall(kindChat, true, "", w, r) })
	mux.HandleFunc("POST /v1/completions", func(w http.ResponseWriter, r *http.Request) { g.inferenceCall(kindCompletion, true, "", w, r) })
	mux.HandleFunc("GET /v1/models", g.models)
	mux.HandleFunc("GET /v1/models/{model}", g.model)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		id := requestID(r.Header.Get("X-Request-Id"))
		w.Header().Set("X-Request-Id", id)
		problem(w, http.StatusNotFound, "not found", "no such route: use POST /v1/endpoints/{endpoint}/predict, /chat/completions or /completions, or the OpenAI routes POST /v1/chat/completions, /v1/completions and GET /v1/models", id)
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Nearly every request is an endpoint's: those whose path the mux
		// would take as it is are routed here, without the mux's matching
		// (about a microsecond and an allocation of a request).
		if er, name := endpointRouteOf(r); er != nil {
			r.Pattern = er.pattern
			g.inferenceCall(er.kind, false, name, w, r)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// endpointRoute is a route that names its endpoint in the path.
type endpointRoute struct {
	pattern, suffix string
	kind            kind
}

var endpointRoutes = []*endpointRoute{
	{pattern: "POST /v1/endpoints/{endpoint}/predict", suffix: "/predict", kind: kindPredict},
	{pattern: "POST /v1/endpoints/{endpoint}/chat/completions", suffix: "/chat/completions", kind: kindChat},
	{pattern: "POST /v1/endpoints/{endpoint}/completions", suffix: "/completions", kind: kindCompletion},
}

// endpointRouteOf is the endpoint route of r and the endpoint it names,
// when r's path is one the mux would match as it is: a POST, no escapes,
// and a name of letters, digits, '-', '_', '.' and '~' that is not a dot
// segment. Any other request is the mux's, which cleans, unescapes,
// redirects and answers 405 and 404 as it does.
func endpointRouteOf(r *http.Request) (*endpointRoute, string) {
	const prefix = "/v1/endpoints/"
	if r.Method != http.MethodPost || r.URL.RawPath != "" || !strings.HasPrefix(r.URL.Path, prefix) {
		return nil, ""
	}
	rest := r.URL.Path[len(prefix):]
	slash := strings.IndexByte(rest, '/')
	if slash <= 0 {
		return nil, ""
	}
	name := rest[:slash]
	if name == "." || name == ".." {
		return nil, ""
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.' || c == '~') {
			return nil, ""
		}
	}
	for _, er := range endpointRoutes {
		if rest[slash:] == er.suffix {
			return er, name
		}
	}
	return nil, ""
}
