package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"modelplane/artifact"
	"modelplane/audit"
	"modelplane/auth"
	"modelplane/billing"
	"modelplane/chargeback"
	"modelplane/db"
	"modelplane/drift"
	"modelplane/endpoint"
	"modelplane/handlers"
	"modelplane/idempotency"
	"modelplane/ingest"
	"modelplane/migrations"
	"modelplane/registry"
	"modelplane/rollout"
	"modelplane/tenant"
	"modelplane/traffic"
)

// natsPinger checks the NATS connection for /readyz.
type natsPinger struct{ nc *nats.Conn }

func (p natsPinger) Ping(ctx context.Context) error { return p.nc.FlushWithContext(ctx) }

// controlPlane is what `server` and `dev` both run: the portal and API over
// PostgreSQL, ClickHouse and NATS.
type controlPlane struct {
	Log            *slog.Logger
	Pool           *pgxpool.Pool
	CH             driver.Conn
	NC             *nats.Conn
	OIDC           *auth.OIDC
	Sessions       auth.SessionConfig
	ArtifactDir    string
	MaxUploadBytes int64
	DevUsers       []handlers.DevUser
	// Drift configures the scheduled drift check (zero: defaults).
	Drift drift.CheckerConfig
	// WakeGrace is how long a woken endpoint keeps its replica (zero:
	// fleet.DefaultWakeGrace).
	WakeGrace time.Duration
}

func (cp controlPlane) handler() (*handlers.Server, error) {
	store, err := artifact.NewStore(cp.ArtifactDir)
	if err != nil {
		return nil, fmt.Errorf("artifact store: %w", err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	now := time.Now
	var meter *billing.Meter
	var reports *chargeback.Service
	var budgets *chargeback.Budgets
	var trafficReader handlers.TrafficReader // nil, not a nil *traffic.Reader: the portal then says "unavailable"
	var driftService *drift.Service
	// Without ClickHouse nothing measures drift: the handlers build a
	// Service without a measurer, whose default criteria leave the gate off.
	var rollouts *rollout.Service
	if cp.CH != nil {
		meter = billing.NewMeter(cp.CH)
		reports = chargeback.New(cp.CH, db.New(cp.Pool), now)
		budgets = chargeback.NewBudgets(cp.Pool, reports, nil, cp.Log, now)
		trafficReader = traffic.NewReader(cp.CH, now)
		driftReader := drift.NewReader(cp.CH, drift.ReaderConfig{})
		driftService = drift.NewService(cp.Pool, driftReader, now)
		rollouts = rollout.New(cp.Pool, now, drift.NewGate(driftReader))
	}
	return handlers.New(handlers.Deps{
		Log:            cp.Log,
		Pool:           cp.Pool,
		Keys:           auth.NewKeys(cp.Pool, now),
		OIDC:           cp.OIDC,
		Sessions:       auth.NewSessions(cp.Pool, cp.Sessions, now),
		Tenant:         tenant.New(cp.Pool, now),
		Registry:       registry.New(cp.Pool, store, artifact.Limits{MaxTotalBytes: cp.MaxUploadBytes, MaxFileBytes: cp.MaxUploadBytes}),
		Endpoints:      endpoint.New(cp.Pool),
		Meter:          meter,
		Chargeback:     reports,
		Budgets:        budgets,
		Traffic:        trafficReader,
		Drift:          driftService,
		Rollouts:       rollouts,
		Audit:          audit.NewLog(cp.Pool),
		Idempotency:    idempotency.New(cp.Pool),
		Ready:          map[string]handlers.Pinger{"postgres": cp.Pool, "clickhouse": cp.CH, "nats": natsPinger{cp.NC}},
		Metrics:        reg,
		Now:            now,
		DevUsers:       cp.DevUsers,
		MaxUploadBytes: cp.MaxUploadBytes,
	}), nil
}

// serve runs h on addr until ctx ends, then drains in-flight requests.
func serve(ctx context.Context, log *slog.Logger, addr string, h http.Handler) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", addr, err)
	}
	return serveOn(ctx, log, ln, h, apiDrain)
}

// apiDrain is how long the API and portal server waits for in-flight
// requests when it stops.
const apiDrain = 10 * time.Second

// serveOn is serve on a listener the caller opened; on stopping it waits up
// to drain for in-flight requests. There is no write timeout: the gateway's
// streams last as long as generations, and it cuts stalled clients itself.
func serveOn(ctx context.Context, log *slog.Logger, ln net.Listener, h http.Handler, drain time.Duration) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 120 * time.Second}
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

// openStores connects PostgreSQL, ClickHouse and NATS and applies migrations.
func openStores(ctx context.Context, dbURL, chURL, natsURL string) (*pgxpool.Pool, driver.Conn, *nats.Conn, error) {
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
	if err := migrations.ClickHouse(ctx, ch); err != nil {
		pool.Close()
		ch.Close()
		return nil, nil, nil, err
	}
	nc, err := nats.Connect(natsURL, nats.Name("modelplane-server"), nats.MaxReconnects(-1))
	if err != nil {
		pool.Close()
		ch.Close()
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
	pool, ch, nc, err := openStores(ctx, string(cfg.DatabaseURL), string(cfg.ClickHouseURL), cfg.NATSURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	defer ch.Close()
	defer nc.Close()
	oidc, err := auth.NewOIDC(ctx, auth.OIDCConfig{Issuer: cfg.OIDCIssuer, ClientID: cfg.OIDCClientID,
		ClientSecret: string(cfg.OIDCSecret), RedirectURL: strings.TrimRight(cfg.PublicURL, "/") + "/auth/callback"}, pool, time.Now)
	if err != nil {
		return fmt.Errorf("oidc: %w", err)
	}
	h, err := controlPlane{Log: log, Pool: pool, CH: ch, NC: nc, OIDC: oidc,
		Sessions:    auth.SessionConfig{IdleTimeout: cfg.SessionIdle, AbsoluteTimeout: cfg.SessionMax},
		ArtifactDir: cfg.ArtifactDir, MaxUploadBytes: cfg.MaxUploadBytes}.handler()
	if err != nil {
		return err
	}
	stop, err := controlPlane{Log: log, Pool: pool, CH: ch, NC: nc,
		Drift: drift.CheckerConfig{Interval: cfg.DriftInterval, AlertAfter: cfg.DriftAlertAfter}, WakeGrace: cfg.WakeGrace}.startLoops(ctx, h.Metrics, h.Rollouts)
	if err != nil {
		return err
	}
	defer stop()
	go sweep(ctx, log, h)
	log.Info("modelplane server listening", slog.String("addr", cfg.HTTPAddr))
	return serve(ctx, log, cfg.HTTPAddr, h.Handler())
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
	return migrations.ClickHouse(ctx, ch)
}
