package app

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"modelplane/bus"
	"modelplane/gateway"
	"modelplane/tlscert"
	"modelplane/tracing"
)

// GatewayConfig configures `modelplane gateway`.
type GatewayConfig struct {
	Addr string
	// AdminAddr serves /metrics, which names every team's endpoints and
	// versions: keep it on loopback or a network only operators reach.
	AdminAddr    string
	NATS         bus.ClientConfig
	StateDir     string
	MaxBodyBytes int64
	Timeout      time.Duration
	StallTimeout time.Duration
	// ReadTimeout bounds reading a request's headers and body (not the
	// answer, so streams are not cut).
	ReadTimeout time.Duration
	// ID names this gateway in request statistics; StatsInterval is how
	// often they are published.
	ID            string
	StatsInterval time.Duration
	// Rate limits per API key and per endpoint (0: unlimited), and the
	// load-shedding bound per replica (0: off).
	KeyRPS                   float64
	KeyBurst                 int64
	EndpointRPS              float64
	EndpointBurst            int64
	MaxOutstandingPerReplica int64
	// ShadowWorkers bounds mirrored requests in flight; EjectFailures
	// failures in a row eject a replica for EjectCooldown (0: off).
	ShadowWorkers int64
	EjectFailures int64
	EjectCooldown time.Duration
	// HoldQueue bounds the requests of one endpoint scaled to zero held
	// while a replica starts (0: none held, 202 at once).
	HoldQueue int64
	// TLS is the listeners' certificate and key (MP_TLS_CERT, MP_TLS_KEY)
	// and, in CA, the bundle replicas' certificates chain to (MP_TLS_CA):
	// set, replicas are called over https.
	TLS tlscert.Files
	// ClientCA is the bundle client certificates must chain to
	// (MP_GATEWAY_CLIENT_CA), read again when it changes; ClientTrustDomain
	// the SPIFFE trust domain their identities are in
	// (MP_GATEWAY_CLIENT_TRUST_DOMAIN). Empty: no client certificates.
	ClientCA          string
	ClientTrustDomain string
	// QuotaGateways is how many gateways share grants' daily quotas
	// (gateway.Config.QuotaGateways).
	QuotaGateways int64
	LogLevel      string
}

// Flags registers the gateway settings on fs, with MP_* environment
// variables as defaults.
func (c *GatewayConfig) Flags(fs *flag.FlagSet) {
	fs.StringVar(&c.Addr, "addr", env("MP_GATEWAY_ADDR", ":8081"), "listen address (MP_GATEWAY_ADDR)")
	fs.StringVar(&c.AdminAddr, "admin-addr", env("MP_GATEWAY_ADMIN_ADDR", DefaultGatewayAdminAddr), "admin listen address serving /metrics, /healthz and /readyz; keep it off public networks (MP_GATEWAY_ADMIN_ADDR)")
	natsFlags(fs, &c.NATS, "nats", nats.DefaultURL)
	fs.StringVar(&c.StateDir, "state-dir", env("MP_GATEWAY_STATE_DIR", ".modelplane/gateway"), "last good routing snapshot; keep it across restarts (MP_GATEWAY_STATE_DIR)")
	fs.Int64Var(&c.MaxBodyBytes, "max-body-bytes", envInt("MP_GATEWAY_MAX_BODY_BYTES", gateway.DefaultMaxBodyBytes), "largest request body (MP_GATEWAY_MAX_BODY_BYTES)")
	fs.DurationVar(&c.Timeout, "timeout", envDuration("MP_GATEWAY_TIMEOUT", gateway.DefaultTimeout), "upstream timeout of every endpoint, to the answer or to the first streamed byte (MP_GATEWAY_TIMEOUT)")
	fs.DurationVar(&c.StallTimeout, "stall-timeout", envDuration("MP_GATEWAY_STALL_TIMEOUT", gateway.DefaultStallTimeout), "a streaming client that takes longer to accept an event is cut (MP_GATEWAY_STALL_TIMEOUT)")
	fs.StringVar(&c.ID, "id", env("MP_GATEWAY_ID", ""), "gateway name in request statistics; default host name plus a random suffix (MP_GATEWAY_ID)")
	fs.DurationVar(&c.ReadTimeout, "read-timeout", envDuration("MP_GATEWAY_READ_TIMEOUT", gateway.DefaultReadTimeout), "how long a client may take to send a request's headers and body (MP_GATEWAY_READ_TIMEOUT)")
	fs.DurationVar(&c.StatsInterval, "stats-interval", envDuration("MP_GATEWAY_STATS_INTERVAL", gateway.DefaultStatsInterval), "how often request statistics are published (MP_GATEWAY_STATS_INTERVAL)")
	fs.Float64Var(&c.KeyRPS, "key-rps", envFloat("MP_GATEWAY_KEY_RPS", 0), "requests per second each API key may make; 0 is unlimited (MP_GATEWAY_KEY_RPS)")
	fs.Int64Var(&c.KeyBurst, "key-burst", envInt("MP_GATEWAY_KEY_BURST", 0), "burst of each API key; 0 is the rate rounded up (MP_GATEWAY_KEY_BURST)")
	fs.Float64Var(&c.EndpointRPS, "endpoint-rps", envFloat("MP_GATEWAY_ENDPOINT_RPS", 0), "requests per second each endpoint takes from all callers; 0 is unlimited (MP_GATEWAY_ENDPOINT_RPS)")
	fs.Int64Var(&c.EndpointBurst, "endpoint-burst", envInt("MP_GATEWAY_ENDPOINT_BURST", 0), "burst of each endpoint; 0 is the rate rounded up (MP_GATEWAY_ENDPOINT_BURST)")
	fs.Int64Var(&c.MaxOutstandingPerReplica, "max-outstanding-per-replica", envInt("MP_GATEWAY_MAX_OUTSTANDING_PER_REPLICA", gateway.DefaultMaxOutstandingPerReplica),
		"requests a replica may have outstanding at this gateway before more get 429; 0 is off (MP_GATEWAY_MAX_OUTSTANDING_PER_REPLICA)")
	fs.Int64Var(&c.ShadowWorkers, "shadow-workers", envInt("MP_GATEWAY_SHADOW_WORKERS", gateway.DefaultShadowWorkers),
		"mirrored requests to shadow versions in flight at once; more are dropped and counted (MP_GATEWAY_SHADOW_WORKERS)")
	fs.Int64Var(&c.EjectFailures, "eject-failures", envInt("MP_GATEWAY_EJECT_FAILURES", gateway.DefaultEjectFailures),
		"failed calls in a row (connect errors, 5xx) that eject a replica for the cool-down; 0 is off (MP_GATEWAY_EJECT_FAILURES)")
	fs.DurationVar(&c.EjectCooldown, "eject-cooldown", envDuration("MP_GATEWAY_EJECT_COOLDOWN", gateway.DefaultEjectCooldown),
		"how long an ejected replica is skipped (MP_GATEWAY_EJECT_COOLDOWN)")
	fs.Int64Var(&c.HoldQueue, "hold-queue", envInt("MP_GATEWAY_HOLD_QUEUE", gateway.DefaultHoldQueue),
		"requests of one endpoint scaled to zero held while a replica starts, each up to the endpoint's cold-start budget; more get 202 at once; 0 holds none (MP_GATEWAY_HOLD_QUEUE)")
	fs.Int64Var(&c.QuotaGateways, "quota-gateways", envInt("MP_GATEWAY_QUOTA_GATEWAYS", gateway.DefaultQuotaGateways),
		"how many gateways share grants' daily quotas; each reserves chunks of 5% of a quota divided by it, so quotas hold within 5% (MP_GATEWAY_QUOTA_GATEWAYS)")
	fs.StringVar(&c.LogLevel, "log-level", env("MP_LOG_LEVEL", "info"), "debug, info, warn or error (MP_LOG_LEVEL)")
	tlsFlags(fs, &c.TLS, "the gateway's listeners")
	tlsCAFlag(fs, &c.TLS, "replicas' (set: replicas are called over https)")
	fs.StringVar(&c.ClientCA, "client-ca", env("MP_GATEWAY_CLIENT_CA", ""), "PEM bundle of the CAs client certificates must chain to, read again when it changes; a verified certificate authenticates as a team's key (docs/tls.md); empty: none asked for (MP_GATEWAY_CLIENT_CA)")
	fs.StringVar(&c.ClientTrustDomain, "client-trust-domain", env("MP_GATEWAY_CLIENT_TRUST_DOMAIN", ""), "SPIFFE trust domain of client certificates: spiffe://<it>/team/<team>/sa/<key name> (MP_GATEWAY_CLIENT_TRUST_DOMAIN)")
}

// gatewayConfig checks the command's settings and turns them into the
// package's; the error names every bad setting.
func (c *GatewayConfig) gatewayConfig() (gateway.Config, error) {
	var errs []string
	bad := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	if c.Addr == "" {
		bad("MP_GATEWAY_ADDR (--addr) is required")
	}
	if err := checkAddr(c.AdminAddr); err != nil {
		bad("MP_GATEWAY_ADMIN_ADDR (--admin-addr) %v", err)
	}
	if c.AdminAddr != "" && c.AdminAddr == c.Addr {
		bad("MP_GATEWAY_ADMIN_ADDR (--admin-addr) must differ from MP_GATEWAY_ADDR (--addr): /metrics stays off the public port")
	}
	errs = append(errs, c.NATS.Validate()...)
	if c.StateDir == "" {
		bad("MP_GATEWAY_STATE_DIR (--state-dir) is required")
	}
	if c.MaxBodyBytes <= 0 {
		bad("MP_GATEWAY_MAX_BODY_BYTES (--max-body-bytes) must be a positive number")
	}
	if c.Timeout <= 0 {
		bad("MP_GATEWAY_TIMEOUT (--timeout) must be a positive duration")
	}
	if c.StallTimeout <= 0 {
		bad("MP_GATEWAY_STALL_TIMEOUT (--stall-timeout) must be a positive duration")
	}
	if c.ReadTimeout <= 0 {
		bad("MP_GATEWAY_READ_TIMEOUT (--read-timeout) must be a positive duration")
	}
	if c.StatsInterval <= 0 {
		bad("MP_GATEWAY_STATS_INTERVAL (--stats-interval) must be a positive duration")
	}
	if c.KeyRPS < 0 || math.IsNaN(c.KeyRPS) || math.IsInf(c.KeyRPS, 0) {
		bad("MP_GATEWAY_KEY_RPS (--key-rps) must be a number, 0 or more")
	}
	if c.KeyBurst < 0 || c.KeyBurst > math.MaxInt32 {
		bad("MP_GATEWAY_KEY_BURST (--key-burst) must be a whole number, 0 or more")
	}
	if c.EndpointRPS < 0 || math.IsNaN(c.EndpointRPS) || math.IsInf(c.EndpointRPS, 0) {
		bad("MP_GATEWAY_ENDPOINT_RPS (--endpoint-rps) must be a number, 0 or more")
	}
	if c.EndpointBurst < 0 || c.EndpointBurst > math.MaxInt32 {
		bad("MP_GATEWAY_ENDPOINT_BURST (--endpoint-burst) must be a whole number, 0 or more")
	}
	if c.MaxOutstandingPerReplica < 0 {
		bad("MP_GATEWAY_MAX_OUTSTANDING_PER_REPLICA (--max-outstanding-per-replica) must be a whole number, 0 or more")
	}
	if c.ShadowWorkers < 1 || c.ShadowWorkers > 1<<20 {
		bad("MP_GATEWAY_SHADOW_WORKERS (--shadow-workers) must be a whole number from 1 to 1048576")
	}
	if c.EjectFailures < 0 || c.EjectFailures > math.MaxInt32 {
		bad("MP_GATEWAY_EJECT_FAILURES (--eject-failures) must be a whole number, 0 or more")
	}
	if c.EjectCooldown <= 0 {
		bad("MP_GATEWAY_EJECT_COOLDOWN (--eject-cooldown) must be a positive duration")
	}
	if c.HoldQueue < 0 || c.HoldQueue > 1<<20 {
		bad("MP_GATEWAY_HOLD_QUEUE (--hold-queue) must be a whole number from 0 to 1048576")
	}
	if c.QuotaGateways < 1 || c.QuotaGateways > 10_000 {
		bad("MP_GATEWAY_QUOTA_GATEWAYS (--quota-gateways) must be a whole number from 1 to 10000")
	}
	if _, err := parseLevel(c.LogLevel); err != nil {
		bad("MP_LOG_LEVEL (--log-level) %v", err)
	}
	errs = append(errs, tlsProblems(c.TLS)...)
	var replicaTLS *tls.Config
	if c.TLS.CA != "" {
		replicaTLS, _ = c.TLS.Client() // Problems named a bad bundle
	}
	switch {
	case c.ClientCA != "" && c.TLS.Cert == "":
		bad("MP_GATEWAY_CLIENT_CA (--client-ca) needs MP_TLS_CERT and MP_TLS_KEY: client certificates come over TLS")
	case c.ClientCA != "" && c.ClientTrustDomain == "":
		bad("MP_GATEWAY_CLIENT_CA (--client-ca) needs MP_GATEWAY_CLIENT_TRUST_DOMAIN (--client-trust-domain): the trust domain of spiffe://<domain>/team/<team>/sa/<name>")
	case c.ClientCA == "" && c.ClientTrustDomain != "":
		bad("MP_GATEWAY_CLIENT_TRUST_DOMAIN (--client-trust-domain) needs MP_GATEWAY_CLIENT_CA (--client-ca): the CAs client certificates chain to")
	}
	if c.ClientCA != "" {
		if _, err := tlscert.LoadBundle(c.ClientCA, nil); err != nil {
			bad("MP_GATEWAY_CLIENT_CA (--client-ca): %v", err)
		}
	}
	if c.ClientTrustDomain != "" {
		if _, err := tlscert.ParseServiceID("spiffe://" + c.ClientTrustDomain + "/team/t/sa/s"); err != nil {
			bad("MP_GATEWAY_CLIENT_TRUST_DOMAIN (--client-trust-domain) %q must be lower-case letters, digits, '.', '-' or '_'", c.ClientTrustDomain)
		}
	}
	if len(errs) > 0 {
		return gateway.Config{}, errors.New("invalid configuration:\n  " + strings.Join(errs, "\n  "))
	}
	return gateway.Config{StateDir: c.StateDir, MaxBodyBytes: c.MaxBodyBytes, Timeout: c.Timeout, StallTimeout: c.StallTimeout,
		ReadTimeout: c.ReadTimeout, ID: c.ID, StatsInterval: c.StatsInterval, KeyRPS: c.KeyRPS, KeyBurst: int(c.KeyBurst), EndpointRPS: c.EndpointRPS,
		EndpointBurst: int(c.EndpointBurst), MaxOutstandingPerReplica: c.MaxOutstandingPerReplica, ShadowWorkers: int(c.ShadowWorkers),
		EjectFailures: zeroIsOff(c.EjectFailures), EjectCooldown: c.EjectCooldown, HoldQueue: zeroIsOff(c.HoldQueue),
		ReplicaTLS: replicaTLS, ClientTrustDomain: c.ClientTrustDomain, QuotaGateways: int(c.QuotaGateways)}, nil
}

// zeroIsOff maps the command's 0 (off) to the package's negative: the
// ejection's and the hold queue's (none held).
func zeroIsOff(n int64) int {
	if n == 0 {
		return -1
	}
	return int(n)
}

// Validate names every bad setting.
func (c *GatewayConfig) Validate() error {
	_, err := c.gatewayConfig()
	return err
}

// envFloat reads a number from the environment; -1 (which Validate names)
// when it is not one.
func envFloat(name string, def float64) float64 {
	if v, ok := os.LookupEnv(name); ok {
		if f, err := strconv.ParseFloat(v, 64); err == nil {
			return f
		}
		return -1
	}
	return def
}

// RunGateway runs `modelplane gateway` until ctx ends. It starts even while
// NATS is unreachable: it serves from its snapshot and connects when NATS
// comes.
func RunGateway(ctx context.Context, c GatewayConfig) error {
	cfg, err := c.gatewayConfig()
	if err != nil {
		return err
	}
	log := NewLogger(c.LogLevel)
	gateway.TuneGC()
	nc, err := connectNATS(c.NATS, log, "modelplane-gateway",
		nats.MaxReconnects(-1),
		nats.RetryOnFailedConnect(true),
		nats.ReconnectWait(time.Second))
	if err != nil {
		return err
	}
	defer nc.Close()
	ln, adm, pub, err := c.listeners(log)
	if err != nil {
		return err
	}
	g, stop, err := startGateway(ctx, cfg, nc, log)
	if err != nil {
		ln.Close()
		adm.Close()
		return err
	}
	defer stop()
	log.Info("modelplane gateway running", slog.String("addr", ln.Addr().String()), slog.String("admin_addr", adm.Addr().String()),
		slog.String("state_dir", cfg.StateDir), slog.String("scheme", pub.Scheme()), slog.Bool("client_certificates", c.ClientCA != ""))
	return serveWithAdmin(ctx, log, ln, GatewayServer(g.Handler(), log), gatewayDrain, adm, g.AdminHandler())
}

// listeners opens the public listener, serving TLS and verifying client
// certificates when a client CA is set, and the admin listener (the same
// certificate, no client certificates); pub is nil for plain HTTP.
func (c *GatewayConfig) listeners(log *slog.Logger) (ln, adm net.Listener, pub *tlscert.Server, err error) {
	admin, err := c.TLS.Server(log)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("MP_TLS_CERT (--tls-cert): %w", err)
	}
	if admin != nil {
		pub = &tlscert.Server{Keypair: admin.Keypair}
		if c.ClientCA != "" {
			if pub.ClientCAs, err = tlscert.LoadBundle(c.ClientCA, log); err != nil {
				return nil, nil, nil, fmt.Errorf("MP_GATEWAY_CLIENT_CA (--client-ca): %w", err)
			}
		}
	}
	ln, adm, err = listenPair(c.Addr, "MP_GATEWAY_ADDR", pub, c.AdminAddr, "MP_GATEWAY_ADMIN_ADDR", admin)
	return ln, adm, pub, err
}

// startGateway builds and starts a gateway, tracing as the OTEL_*
// variables say (package tracing); its Stop ends it, and stop flushes the
// traces.
func startGateway(ctx context.Context, cfg gateway.Config, nc *nats.Conn, log *slog.Logger) (g *gateway.Gateway, stop func(), err error) {
	tp, err := tracing.FromEnv(ctx, "modelplane-gateway")
	if err != nil {
		return nil, nil, err
	}
	if tp.On {
		cfg.Tracer = tp
		log.Info("tracing requests over OTLP (OTEL_* variables)")
	}
	if g, err = gateway.New(cfg, nc, log); err == nil {
		err = g.Start(ctx)
	}
	if err != nil {
		_ = tp.Shutdown(context.WithoutCancel(ctx))
		return nil, nil, err
	}
	return g, func() {
		g.Stop()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = tp.Shutdown(sctx)
	}, nil
}

// startDevGateway runs the gateway of `modelplane dev` on ln, and its
// admin listener on adminAddr, with its snapshot under dir/gateway, and adds
// MP_GATEWAY to the dev.env file. It returns the admin listener's address;
// stop ends it.
func startDevGateway(ctx context.Context, log *slog.Logger, nc *nats.Conn, dir string, ln net.Listener, adminAddr, envFile string) (admin string, stop func(), err error) {
	adm, err := net.Listen("tcp", adminAddr)
	if err != nil {
		ln.Close()
		return "", nil, fmt.Errorf("listen %s (MP_GATEWAY_ADMIN_ADDR): %w", adminAddr, err)
	}
	cfg := gateway.Config{StateDir: filepath.Join(dir, "gateway"), MaxOutstandingPerReplica: gateway.DefaultMaxOutstandingPerReplica}
	g, stopGateway, err := startGateway(ctx, cfg, nc, log)
	if err != nil {
		ln.Close()
		adm.Close()
		return "", nil, err
	}
	f, err := os.OpenFile(envFile, os.O_APPEND|os.O_WRONLY, 0o600)
	if err == nil {
		_, err = fmt.Fprintf(f, "export MP_GATEWAY=http://%s\n", ln.Addr())
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		ln.Close()
		adm.Close()
		stopGateway()
		return "", nil, fmt.Errorf("dev.env: %w", err)
	}
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := serveWithAdmin(sctx, log, ln, GatewayServer(g.Handler(), log), gatewayDrain, adm, g.AdminHandler()); err != nil {
			log.Error("gateway", slog.String("error", err.Error()))
		}
	}()
	return adm.Addr().String(), func() { cancel(); <-done; stopGateway() }, nil
}

// gatewayDrain is how long a stopping gateway waits for in-flight requests:
// longer than the API's, since streams last as long as generations.
const gatewayDrain = 30 * time.Second
