package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/coder/quartz"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/trace"

	"modelplane/auth"
	"modelplane/bus"
	"modelplane/controlplane"
	"modelplane/db"
	"modelplane/drift"
	"modelplane/egress"
	"modelplane/h1"
	"modelplane/handlers"
	"modelplane/ingest"
	"modelplane/migrations"
	"modelplane/notify"
	"modelplane/tlscert"
	"modelplane/tracing"
)

// natsPinger checks the NATS connection for /readyz.
type natsPinger struct{ nc *nats.Conn }

func (p natsPinger) Ping(ctx context.Context) error { return p.nc.FlushWithContext(ctx) }

// HTTPOptions are the HTTP layer's settings beside the control plane's
// services.
type HTTPOptions struct {
	DevUsers       []handlers.DevUser
	MaxUploadBytes int64
	// Ready names the dependencies /readyz checks.
	Ready map[string]handlers.Pinger
	// AgentToken is what node agents that have not enrolled present to
	// fetch artifacts; "" refuses them all.
	AgentToken Secret
	// PublicURL is where nodes reach the control plane, for the join
	// command line the portal shows.
	PublicURL string
	// Tracer traces every request (nil: nothing).
	Tracer trace.TracerProvider
}

// readiness is what /readyz checks in `server` and `dev`.
func readiness(pool *pgxpool.Pool, ch driver.Conn, nc *nats.Conn) map[string]handlers.Pinger {
	return map[string]handlers.Pinger{"postgres": pool, "clickhouse": ch, "nats": natsPinger{nc}}
}

// NewHTTP builds the portal and API over cp's services: what `server` and
// `dev` serve and `bench api` drives.
func NewHTTP(cp *controlplane.ControlPlane, o HTTPOptions) *handlers.Server {
	return handlers.New(handlers.Deps{
		Set:            &cp.Set,
		Clock:          quartz.NewReal(),
		Ready:          o.Ready,
		AgentToken:     string(o.AgentToken),
		PublicURL:      o.PublicURL,
		DevUsers:       o.DevUsers,
		MaxUploadBytes: o.MaxUploadBytes,
		MaxBodyBytes:   handlers.DefaultMaxBodyBytes,
		Tracer:         o.Tracer,
	})
}

// processTracer is a process's tracer provider for service, as the OTEL_*
// variables say (package tracing), logging that it traces what when on.
// Shutdown flushes it.
func processTracer(ctx context.Context, log *slog.Logger, service, what string) (tracing.Provider, error) {
	tp, err := tracing.FromEnv(ctx, service)
	if err != nil {
		return tracing.Provider{}, err
	}
	if tp.On {
		log.Info("tracing " + what + " over OTLP (OTEL_* variables)")
	}
	return tp, nil
}

// controlPlaneTracer is the control plane's: its API calls, reconcile
// passes and autoscaler rounds.
func controlPlaneTracer(ctx context.Context, log *slog.Logger) (tracing.Provider, error) {
	return processTracer(ctx, log, "modelplane-server", "API calls and control loops")
}

// adminDrain is how long an admin listener waits for a scrape in flight.
const adminDrain = 2 * time.Second

// serveWithAdmin serves srv on ln and admin on adm until ctx ends or either
// fails; a failure of one stops the other, so neither runs unseen alone.
func serveWithAdmin(ctx context.Context, log *slog.Logger, ln net.Listener, srv server, drain time.Duration, adm net.Listener, admin http.Handler) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		err := serveOn(ctx, log, adm, httpServer(admin), adminDrain)
		cancel()
		errc <- err
	}()
	err := serveOn(ctx, log, ln, srv, drain)
	cancel()
	if aerr := <-errc; err == nil && aerr != nil {
		err = fmt.Errorf("admin listener: %w", aerr)
	}
	return err
}

// apiDrain is how long the API and portal server waits for in-flight
// requests when it stops.
const apiDrain = 10 * time.Second

// server is what serveOn runs: net/http's server, or h1's for the
// gateway's public listener.
type server interface {
	Serve(net.Listener) error
	Shutdown(context.Context) error
}

// httpServer is net/http's server of h. There is no write timeout: the
// gateway's streams last as long as generations, and it cuts stalled
// clients itself.
func httpServer(h http.Handler) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 120 * time.Second}
}

// GatewayServer serves the gateway's public routes h with h1, which
// hands what it does not serve itself (TLS, HTTP/1.0, chunked bodies) to
// net/http with the same timeouts (docs/gateway.md); bench gateway runs
// the same.
func GatewayServer(h http.Handler, log *slog.Logger) *h1.Server {
	return &h1.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 120 * time.Second, Log: log}
}

// serveOn is serve on a listener the caller opened; on stopping it waits up
// to drain for in-flight requests.
func serveOn(ctx context.Context, log *slog.Logger, ln net.Listener, srv server, drain time.Duration) error {
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), drain)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil {
		log.Warn("http shutdown", slog.String("error", err.Error()))
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// openStores connects PostgreSQL, ClickHouse and NATS (as the control
// plane's credential, natsOpts) and applies migrations.
func openStores(ctx context.Context, dbURL, chURL, natsURL string, natsOpts []nats.Option) (*pgxpool.Pool, driver.Conn, *nats.Conn, error) {
	pool, err := db.Open(ctx, dbURL)
	if err != nil {
		return nil, nil, nil, err
	}
	if err := migrations.Postgres(ctx, pool); err != nil {
		pool.Close()
		return nil, nil, nil, err
	}
	ch, err := ingest.OpenClickHouse(ctx, chURL)
	if err != nil {
		pool.Close()
		return nil, nil, nil, err
	}
	if err := migrations.ClickHouseLocked(ctx, pool, ch); err != nil {
		pool.Close()
		ch.Close()
		return nil, nil, nil, err
	}
	nc, err := nats.Connect(natsURL, append(natsOpts, nats.Name("modelplane-server"), nats.MaxReconnects(-1))...)
	if err != nil {
		pool.Close()
		ch.Close()
		if hint := bus.Hint(err); hint != "" {
			return nil, nil, nil, fmt.Errorf("connect nats: %w (%s)", err, hint)
		}
		return nil, nil, nil, fmt.Errorf("connect nats: %w", err)
	}
	return pool, ch, nc, nil
}

// RunServer runs `modelplane server` until ctx ends.
func RunServer(ctx context.Context, cfg ServerConfig) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	log := NewLogger(cfg.LogLevel)
	if cfg.AgentToken != "" {
		warnSharedAgentToken(log, "server")
	}
	natsOpts, err := cfg.NATS.Options(log)
	if err != nil {
		return err
	}
	pool, ch, nc, err := openStores(ctx, string(cfg.DatabaseURL), string(cfg.ClickHouseURL), cfg.NATS.URL, natsOpts)
	if err != nil {
		return err
	}
	defer pool.Close()
	defer ch.Close()
	defer nc.Close()
	// One egress allow-list for the outbound calls: the operator's hosts
	// and the IdP they configured, each dialled only at an address the
	// policy accepts (never loopback, link-local or metadata).
	egressPolicy := &egress.Policy{Hosts: slices.Clone(cfg.EgressHosts)}
	if u, err := url.Parse(cfg.OIDCIssuer); err == nil && u.Hostname() != "" {
		egressPolicy.Hosts = append(egressPolicy.Hosts, u.Hostname())
	}
	// The one real clock of the control plane: every service and loop
	// gets it from here.
	clock := quartz.NewReal()
	oidc, err := auth.NewOIDC(ctx, auth.OIDCConfig{Issuer: cfg.OIDCIssuer, ClientID: cfg.OIDCClientID,
		ClientSecret: string(cfg.OIDCSecret), RedirectURL: strings.TrimRight(cfg.PublicURL, "/") + "/auth/callback",
		CLIClientID: cfg.OIDCCLIClientID, HTTPClient: egressPolicy.Client(10 * time.Second)}, pool, clock)
	if err != nil {
		return fmt.Errorf("oidc: %w", err)
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find the modelplane binary for validation: %w", err)
	}
	tp, err := controlPlaneTracer(ctx, log)
	if err != nil {
		return err
	}
	defer func() { _ = tp.Shutdown(context.WithoutCancel(ctx)) }()
	cpCfg := controlplane.Config{Log: log, OIDC: oidc, Clock: clock, Tracer: tp,
		Sessions:    auth.SessionConfig{IdleTimeout: cfg.SessionIdle, AbsoluteTimeout: cfg.SessionMax},
		ArtifactDir: cfg.ArtifactDir, MaxUploadBytes: cfg.MaxUploadBytes, Egress: egressPolicy,
		Drift: drift.CheckerConfig{Interval: cfg.DriftInterval, AlertAfter: cfg.DriftAlertAfter}, WakeGrace: cfg.WakeGrace,
		AutoscaleInterval: cfg.AutoscaleInterval,
		RuntimeBinary:     self, ValidationTimeout: cfg.ValidationTimeout, ValidationMemoryMB: cfg.ValidationMemoryMB,
		ValidationUID: int(cfg.ValidationUID), ValidationGID: int(cfg.ValidationGID), Alertmanager: cfg.AlertmanagerURL,
		DefaultQuota: cfg.DefaultQuota, RequireAttestation: cfg.RequireAttestation}
	if cpCfg.SecretKeys, err = notify.ParseKeyring(string(cfg.SecretKey)); err != nil {
		return err
	}
	if cfg.SecretKey == "" {
		log.Warn("MP_SECRET_KEY is not set: teams cannot create webhooks")
	}
	if cfg.NATSAuthority != "" {
		closeSys, err := enrollmentConfig(&cpCfg, cfg, log)
		if err != nil {
			return err
		}
		defer closeSys()
	}
	cp, err := controlplane.New(controlplane.Stores{Pool: pool, CH: ch, NC: nc}, cpCfg)
	if err != nil {
		return err
	}
	h := NewHTTP(cp, HTTPOptions{MaxUploadBytes: cfg.MaxUploadBytes, Ready: readiness(pool, ch, nc), AgentToken: cfg.AgentToken, PublicURL: cfg.PublicURL,
		Tracer: tp})
	if err := cp.Start(ctx); err != nil {
		return err
	}
	defer cp.Stop()
	ln, adm, srvTLS, err := cfg.listeners(log)
	if err != nil {
		return err
	}
	log.Info("modelplane server listening", slog.String("addr", ln.Addr().String()), slog.String("admin_addr", adm.Addr().String()),
		slog.String("scheme", srvTLS.Scheme()))
	return serveWithAdmin(ctx, log, ln, httpServer(h.Handler()), apiDrain, adm, h.AdminHandler())
}

// listeners opens the portal and API listener and the admin listener,
// both serving TLS with the configured certificate when there is one.
func (cfg *ServerConfig) listeners(log *slog.Logger) (ln, adm net.Listener, s *tlscert.Server, err error) {
	if s, err = cfg.TLS.Server(log); err != nil {
		return nil, nil, nil, fmt.Errorf("MP_TLS_CERT (--tls-cert): %w", err)
	}
	ln, adm, err = listenPair(cfg.HTTPAddr, "MP_HTTP_ADDR", s, cfg.AdminAddr, "MP_ADMIN_ADDR", s)
	return ln, adm, s, err
}

// MigrateConfig configures `modelplane migrate`.
type MigrateConfig struct {
	DatabaseURL   Secret
	ClickHouseURL Secret
}

// Flags registers the migrate settings on fs.
func (c *MigrateConfig) Flags(fs *flag.FlagSet) {
	c.DatabaseURL = Secret(env("MP_DATABASE_URL", ""))
	fs.Var(secretFlag{&c.DatabaseURL}, "database-url", "PostgreSQL URL (MP_DATABASE_URL)")
	c.ClickHouseURL = Secret(env("MP_CLICKHOUSE_URL", ""))
	fs.Var(secretFlag{&c.ClickHouseURL}, "clickhouse-url", "ClickHouse URL (MP_CLICKHOUSE_URL); empty skips ClickHouse")
}

// RunMigrate applies PostgreSQL and ClickHouse migrations.
func RunMigrate(ctx context.Context, cfg MigrateConfig) error {
	if cfg.DatabaseURL == "" {
		return errors.New("invalid configuration: MP_DATABASE_URL (--database-url) is required")
	}
	pool, err := db.Open(ctx, string(cfg.DatabaseURL))
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := migrations.Postgres(ctx, pool); err != nil {
		return err
	}
	if cfg.ClickHouseURL == "" {
		return nil
	}
	ch, err := ingest.OpenClickHouse(ctx, string(cfg.ClickHouseURL))
	if err != nil {
		return err
	}
	defer ch.Close()
	return migrations.ClickHouseLocked(ctx, pool, ch)
}
