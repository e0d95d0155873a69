package controlplane

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/coder/quartz"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.opentelemetry.io/otel/trace"

	"modelplane/artifact"
	"modelplane/audit"
	"modelplane/auth"
	"modelplane/autoscaler"
	"modelplane/billing"
	"modelplane/bus"
	"modelplane/busapi"
	"modelplane/chargeback"
	"modelplane/db"
	"modelplane/drift"
	"modelplane/egress"
	"modelplane/endpoint"
	"modelplane/enrollment"
	"modelplane/fleet"
	"modelplane/grant"
	"modelplane/idempotency"
	"modelplane/ingest"
	"modelplane/notify"
	"modelplane/opsmetrics"
	"modelplane/outbox"
	"modelplane/quota"
	"modelplane/readcache"
	"modelplane/registry"
	"modelplane/replicalog"
	"modelplane/reqstats"
	"modelplane/rollout"
	"modelplane/scrape"
	"modelplane/service"
	"modelplane/services"
	"modelplane/tenant"
	"modelplane/trust"
	"modelplane/versioncheck"
)

// Stores are the connections the control plane runs on. CH and NC may be
// nil for a control plane that only serves the API over PostgreSQL (tests
// of the HTTP layer): what needs them is then absent, and Start refuses.
type Stores struct {
	Pool *pgxpool.Pool
	CH   driver.Conn
	NC   *nats.Conn
}

// Config is what the control plane needs besides its stores.
type Config struct {
	Log *slog.Logger
	// OIDC is the relying party of the company IdP; nil disables SSO
	// sign-in, bearer tokens and the identity publisher.
	OIDC           *auth.OIDC
	Sessions       auth.SessionConfig
	ArtifactDir    string
	MaxUploadBytes int64
	// Egress is the operator's allow-list for outbound calls to addresses
	// users name (https:// artifact URIs); nil allows none.
	Egress *egress.Policy
	// Drift configures the scheduled drift check (zero: defaults).
	Drift drift.CheckerConfig
	// WakeGrace is how long a woken endpoint keeps its replica (zero:
	// fleet.DefaultWakeGrace).
	WakeGrace time.Duration
	// RequireAttestation refuses heartbeats of nodes without an attested
	// inventory (fleet.Options.RequireAttestation).
	RequireAttestation bool
	// DefaultQuota caps every team without a quota of its own of a
	// resource (fleet.Options.DefaultQuota); nil: such teams are uncapped.
	DefaultQuota map[string]float64
	// HoldPlacement is fleet.Options.HoldPlacement (nil: never held).
	HoldPlacement func(nodes int) bool
	// AutoscaleInterval is how often the leader evaluates every endpoint's
	// replica count (zero: autoscaler.DefaultInterval).
	AutoscaleInterval time.Duration
	// Clock is the clock of every service and background loop (nil:
	// quartz.NewReal()); tests pass a quartz.Mock and move it.
	Clock quartz.Clock
	// Tracer traces each pass of the fleet reconciler and each autoscaler
	// round (package tracing); nil traces nothing.
	Tracer trace.TracerProvider
	// RuntimeBinary is the modelplane binary whose `runtime validate`
	// validates uploaded versions of the built-in runtime (the server's
	// own, os.Executable); empty turns validation at registration off, and
	// such versions stay registered.
	RuntimeBinary string
	// ValidationTimeout and ValidationMemoryMB limit one validation's
	// child process (zero: package versioncheck's defaults).
	ValidationTimeout  time.Duration
	ValidationMemoryMB int64
	// ValidationUID and ValidationGID are the validation child's user
	// when the control plane is root (zero: versioncheck.DefaultSandboxID).
	ValidationUID, ValidationGID int
	// Authority mints the credentials of enrolling nodes; nil leaves node
	// enrollment off (Enrollment is nil). Push sends its revocations to
	// the NATS servers (over a system-user connection).
	Authority *bus.Authority
	Push      enrollment.Pusher
	// Reconnected receives when Push's connection reconnects, so the
	// revocations are pushed again to a server that restarted without
	// them (enrollment.Repusher); nil: only every RepushInterval.
	Reconnected <-chan struct{}
	// NodeNATSURLs and NodeNATSCA are what enrolling nodes are told about
	// NATS (empty: their own settings).
	NodeNATSURLs []string
	NodeNATSCA   string
	// SecretKeys seal webhook secrets (MP_SECRET_KEY; nil or empty: no
	// webhook can be created). Alertmanager is the base URL the
	// control plane's own alerts go to (MP_ALERTMANAGER_URL; empty: none).
	SecretKeys   *notify.Keyring
	Alertmanager string
}

// Advisory-lock ids of the loops that run once per control plane.
const (
	leadFleet       = 7_316_020_010
	leadOutbox      = 7_316_020_011
	leadUsageIngest = 7_316_020_012
	leadReqStats    = 7_316_020_013
	leadPredictions = 7_316_020_014
	leadIdentity    = 7_316_020_015
	leadBudgets     = 7_316_020_016
	leadSeal        = 7_316_020_017
	leadRollouts    = 7_316_020_020
	leadDrift       = 7_316_020_030
	leadRetention   = 7_316_020_031
	leadValidation  = 7_316_020_040
	leadEnrollment  = 7_316_020_041
	leadNotify      = 7_316_020_050
)

// ControlPlane is every domain service, built once, and the background
// services that run beside them. A field the stores cannot back is nil
// (Meter, Chargeback, Advisor, Traffic and Drift without ClickHouse).
type ControlPlane struct {
	// Set is the domain services, which the HTTP layer takes whole.
	services.Set
	Pool *pgxpool.Pool
	// Relay publishes outbox rows to NATS; nil without NATS.
	Relay *outbox.Relay
	// Validator validates uploaded versions of the built-in runtime; nil
	// without Config.RuntimeBinary. It runs as a leader-only background
	// service when Start runs the background (NATS and ClickHouse
	// present); its Pass may be called directly (demo seeding, a control
	// plane without them).
	Validator  *versioncheck.Validator
	notifier   *notify.Sender
	js         jetstream.JetStream
	background *service.Group
}

// New builds the control plane. It does no I/O: Start begins the
// background work.
func New(st Stores, cfg Config) (*ControlPlane, error) {
	if st.Pool == nil {
		return nil, errors.New("control plane: no PostgreSQL pool")
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	clock := cfg.Clock
	if clock == nil {
		clock = quartz.NewReal()
	}
	store, err := artifact.NewStore(cfg.ArtifactDir)
	if err != nil {
		return nil, fmt.Errorf("artifact store: %w", err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	cp := &ControlPlane{Pool: st.Pool, Set: services.Set{
		Log:       cfg.Log,
		Keys:      auth.NewKeys(st.Pool, clock),
		OIDC:      cfg.OIDC,
		Sessions:  auth.NewSessions(st.Pool, cfg.Sessions, clock),
		Tenant:    tenant.New(st.Pool, clock),
		Registry:  registry.New(st.Pool, store, artifact.Limits{MaxTotalBytes: cfg.MaxUploadBytes, MaxFileBytes: cfg.MaxUploadBytes}).WithEgress(cfg.Egress).WithClock(clock),
		Endpoints: endpoint.New(st.Pool),
		Fleet: fleet.New(st.Pool, fleet.Options{Clock: clock, Log: cfg.Log, WakeGrace: cfg.WakeGrace,
			RequireAttestation: cfg.RequireAttestation, DefaultQuota: cfg.DefaultQuota, HoldPlacement: cfg.HoldPlacement}),
		Attestations: trust.NewAttestations(st.Pool, clock),
		Quotas:       quota.New(st.Pool, clock),
		Rates:        billing.NewBook(st.Pool, clock),
		Audit:        audit.NewLog(st.Pool),
		Idempotency:  idempotency.New(st.Pool),
		Metrics:      reg,
		Scrape:       scrape.New(st.Pool),
	}}
	if cfg.RuntimeBinary != "" {
		cp.Validator = versioncheck.New(versioncheck.Config{Pool: st.Pool, Store: store, Binary: cfg.RuntimeBinary,
			Timeout: cfg.ValidationTimeout, MemoryMB: cfg.ValidationMemoryMB, UID: cfg.ValidationUID, GID: cfg.ValidationGID, Log: cfg.Log, Clock: clock})
		cp.Registry.WithValidation(cp.Validator.Wake)
	}
	if cfg.Authority != nil {
		cp.Enrollment = enrollment.New(st.Pool, cfg.Authority, cfg.Push, clock).Advertise(cfg.NodeNATSURLs, cfg.NodeNATSCA)
	}
	if err := cp.Fleet.Register(reg); err != nil {
		return nil, fmt.Errorf("fleet metrics: %w", err)
	}
	// Changes that write outbox rows (budget and drift alerts, routing
	// entries) wake the relay, so they leave at once instead of at its
	// next poll.
	published := func() {}
	if st.NC != nil {
		if cp.js, err = jetstream.New(st.NC); err != nil {
			return nil, fmt.Errorf("jetstream: %w", err)
		}
		cp.Logs = replicalog.New(st.NC, cp.Endpoints)
		cp.Relay = outbox.NewRelay(st.Pool, cp.js, cfg.Log, clock)
		published = cp.Relay.Wake
	}
	var driftReader *drift.Reader
	var gate rollout.DriftMeasurer
	if st.CH != nil {
		cp.Meter = billing.NewMeter(st.CH)
		cp.Chargeback = chargeback.New(st.CH, db.New(st.Pool), clock).WithCache(readcache.Options{Fresh: chargeback.ClosedFresh, MaxAge: chargeback.ClosedMaxAge})
		cp.Traffic = reqstats.NewReader(st.CH, clock).WithCache(readcache.Options{Fresh: reqstats.ExplorerFresh, MaxAge: reqstats.ExplorerMaxAge})
		driftReader = drift.NewReader(st.CH, drift.ReaderConfig{})
		cp.Drift = drift.NewService(st.Pool, driftReader, clock).WithCache(readcache.Options{Fresh: drift.ReportFresh, MaxAge: drift.ReportMaxAge})
		gate = drift.NewGate(driftReader)
		eps := cp.Endpoints
		cp.Advisor = chargeback.NewAdvisor(cp.Chargeback, func(ctx context.Context, p *auth.Principal, name string) (int32, error) {
			e, err := eps.Get(ctx, p, name)
			return e.MinReplicas, err
		})
	}
	cp.Budgets = chargeback.NewBudgets(st.Pool, cp.Chargeback, published, cfg.Log, clock)
	cp.Grants = grant.New(st.Pool, clock, published)
	// A revocation names the graphs it breaks.
	cp.Grants.SetDependents(cp.Endpoints)
	cp.notifier = notify.NewSender(notify.SenderConfig{Pool: st.Pool, Keys: cfg.SecretKeys, Egress: cfg.Egress,
		Alertmanager: cfg.Alertmanager, Clock: clock, Log: cfg.Log})
	cp.Webhooks = notify.NewWebhooks(st.Pool, cfg.SecretKeys, cfg.Egress, clock, cp.notifier.Wake)
	// The fleet's state and the budgets as Prometheus series on the admin
	// listener (docs/operations.md lists them).
	reg.MustRegister(opsmetrics.New(st.Pool, clock, cfg.Log), cp.Budgets)
	cp.Rollouts = rollout.New(st.Pool, clock, gate)
	if st.NC != nil && st.CH != nil {
		if err := cp.buildBackground(st, cfg, clock, driftReader, gate, published); err != nil {
			return nil, err
		}
	}
	return cp, nil
}

// buildBackground lists the background services: heartbeat intake and the
// sweeps on every replica, the rest once per control plane under a lease
// (an ingest's check-then-insert is exactly-once only with one consumer).
func (cp *ControlPlane) buildBackground(st Stores, cfg Config, clock quartz.Clock, driftReader *drift.Reader, gate rollout.DriftMeasurer, published func()) error {
	usage, err := ingest.NewUsage(ingest.UsageConfig{JS: cp.js, CH: st.CH, Log: cfg.Log, Metrics: cp.Metrics, Clock: clock,
		LoadRates:       func(ctx context.Context) (ingest.Pricer, error) { return billing.LoadRates(ctx, db.New(st.Pool)) },
		LoadAllocations: billing.LoadAllocations(db.New(st.Pool))})
	if err != nil {
		return err
	}
	reqstats, err := ingest.NewReqStats(ingest.ReqStatsConfig{JS: cp.js, CH: st.CH, Log: cfg.Log})
	if err != nil {
		return err
	}
	predictions, err := ingest.NewPredictions(ingest.PredictionsConfig{JS: cp.js, CH: st.CH, Log: cfg.Log})
	if err != nil {
		return err
	}
	checker, err := drift.NewChecker(st.Pool, driftReader, published, cfg.Log, clock, cp.Metrics, cfg.Drift)
	if err != nil {
		return err
	}
	// The intake wakes the reconciler on heartbeats that change a replica;
	// the reconciler asks the intake how long it has heard the fleet.
	var reconciler *fleet.Controller
	intake := fleet.NewIntake(cp.Fleet, st.NC, cfg.Log, func() { reconciler.Wake() })
	reconciler = fleet.NewController(cp.Fleet, fleet.ControllerOptions{Log: cfg.Log, Interval: time.Second, Listening: intake,
		Published: published, Tracer: cfg.Tracer})
	// Every change of an endpoint's demand wakes the reconciler, as
	// heartbeats that change a replica and autoscaler decisions do.
	cp.Endpoints.OnChange(reconciler.Wake)
	var history autoscaler.HistoryFunc
	if cp.Traffic != nil {
		history = cp.Traffic.HourlyRates
	}
	scaler := autoscaler.New(st.Pool, autoscaler.Options{Clock: clock, Log: cfg.Log, Interval: cfg.AutoscaleInterval,
		Grace: cp.Fleet.Grace(), Changed: reconciler.Wake, Published: published, History: history, Tracer: cfg.Tracer})
	// The rollout controller writes routing entries in its own
	// transactions and wakes the relay, so a rollback leaves the candidate
	// one relay hop after it commits (docs/rollouts.md); it gates
	// classification and regression rollouts on output drift.
	var stats rollout.StatsReader // nil, not a nil *reqstats.Reader, without ClickHouse
	if cp.Traffic != nil {
		stats = cp.Traffic
	}
	rollouts := rollout.NewController(rollout.ControllerConfig{Pool: st.Pool, Stats: stats, Log: cfg.Log,
		Drift: gate, Clock: clock, Interval: time.Second, Published: func() { published(); cp.Rollouts.Changed() }})
	cp.Rollouts.OnChange(rollouts.Wake)

	lease := func(id int64, s service.Service) service.Service { return db.NewLease(st.Pool, id, s, cfg.Log) }
	g := service.NewGroup(
		intake,
		&eventWaker{nc: st.NC, changed: cp.Rollouts.Changed},
		auth.NewSweeper(cp.Sessions, cfg.OIDC, cfg.Log, clock),
		cp.Idempotency.Sweeper(cfg.Log, clock),
		cp.Registry.UploadSweeper(cfg.Log),
		lease(leadOutbox, cp.Relay),
		// The autoscaler shares the reconciler's lease: both are the
		// fleet's leader, and every lease holds a pooled connection.
		lease(leadFleet, service.NewGroup(reconciler, scaler)),
		lease(leadRollouts, rollouts),
		lease(leadUsageIngest, usage),
		lease(leadReqStats, reqstats),
		lease(leadPredictions, predictions),
		lease(leadBudgets, cp.Budgets.Checker()),
		lease(leadSeal, chargeback.NewSealer(st.CH, cfg.Log, clock)),
		lease(leadDrift, checker),
		lease(leadRetention, drift.NewRetention(st.Pool, st.CH, cfg.Log, clock)),
		lease(leadNotify, cp.notifier.Service()),
	)
	if cp.Validator != nil {
		g.Add(lease(leadValidation, cp.Validator))
	}
	if cp.Enrollment != nil {
		g.Add(lease(leadEnrollment, cp.Enrollment.Sweeper(cfg.Log, clock)))
		g.Add(cp.Enrollment.Repusher(cfg.Log, clock, cfg.Reconnected))
	}
	if cfg.OIDC != nil {
		g.Add(lease(leadIdentity, auth.NewIdentityLoop(cfg.OIDC.IdentityPublisher(st.Pool), bus.Keys(cp.js, busapi.BucketIdentity), cfg.Log, clock)))
	}
	cp.background = g
	return nil
}

// Start creates the JetStream buckets and streams, republishes the API
// key digests the gateways authenticate from (keys made before mp_keys
// existed, or whose entry was lost) and starts the background services.
func (cp *ControlPlane) Start(ctx context.Context) error {
	if cp.background == nil {
		return errors.New("control plane: background services need NATS and ClickHouse")
	}
	ectx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err := bus.Ensure(ectx, cp.js)
	cancel()
	if err != nil {
		return err
	}
	if _, err := cp.Tenant.PublishKeys(ctx); err != nil {
		return fmt.Errorf("publish key digests: %w", err)
	}
	if cp.Enrollment != nil {
		// The account JWT's revocation list lives in memory: rebuild it
		// before any node can connect on a stale one.
		if err := cp.Enrollment.Restore(ctx); err != nil {
			return err
		}
	}
	return cp.background.Start(ctx)
}

// Stop stops the background services and waits for them.
func (cp *ControlPlane) Stop() {
	if cp.background != nil {
		cp.background.Stop()
	}
}
