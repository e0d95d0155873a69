package handlers

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"modelplane/audit"
	"modelplane/auth"
	"modelplane/billing"
	"modelplane/chargeback"
	"modelplane/drift"
	"modelplane/endpoint"
	"modelplane/fleet"
	"modelplane/idempotency"
	"modelplane/registry"
	"modelplane/rollout"
	"modelplane/tenant"
	"modelplane/traffic"
)

// Pinger reports whether a dependency is reachable, for /readyz.
type Pinger interface {
	Ping(ctx context.Context) error
}

// Deps are what the handlers need; cmd builds them.
type Deps struct {
	Log       *slog.Logger
	Pool      *pgxpool.Pool
	Keys      *auth.Keys
	OIDC      *auth.OIDC // nil disables SSO sign-in and bearer tokens
	Sessions  *auth.Sessions
	Tenant    *tenant.Service
	Registry  *registry.Service
	Endpoints *endpoint.Service
	Fleet     *fleet.Fleet   // nil: one is built on Pool and Now
	Meter     *billing.Meter // nil: the fleet page shows no metered total
	// Rates is the cost-rate history; nil: one is built on Pool and Now.
	Rates *billing.Book
	// Chargeback reads usage and cost reports from ClickHouse; nil: the
	// chargeback API answers 503 and the portal page says it is unavailable.
	Chargeback *chargeback.Service
	// Budgets keeps monthly budgets and their alerts; nil: the budget API
	// answers 503 and the chargeback page shows none.
	Budgets *chargeback.Budgets
	// Advisor gives right-sizing advice; nil: one is built on Chargeback
	// and Endpoints when Chargeback is set.
	Advisor *chargeback.Advisor
	// Rollouts starts and drives rollouts; nil: one is built on Pool and Now.
	Rollouts *rollout.Service
	// Traffic reads the gateways' request statistics (a *traffic.Reader
	// over ClickHouse); nil: the endpoint page and API say they are
	// unavailable.
	Traffic TrafficReader
	// Drift serves drift reports and stored scores; nil: the drift page
	// and API say drift is unavailable (no ClickHouse).
	Drift *drift.Service
	// Audit lists the audit log for the API and the team page.
	Audit *audit.Log
	// Idempotency stores the Idempotency-Key records of API POSTs.
	Idempotency *idempotency.Store
	// GatewayURL is the inference gateway's base URL; "" makes the
	// endpoint page's Try it section say the gateway is not configured.
	GatewayURL string
	// GatewayKey is a platform API key the Try it section sends requests
	// with (modelplane dev sets one); "" shows only the curl command.
	GatewayKey string
	Ready      map[string]Pinger // name → dependency checked by /readyz
	Metrics    *prometheus.Registry
	Now        func() time.Time
	// DevUsers, when set, are shown on the sign-in page (modelplane dev).
	DevUsers []DevUser
	// MaxUploadBytes bounds a version upload; other bodies are bounded by MaxBodyBytes.
	MaxUploadBytes int64
	MaxBodyBytes   int64
}

// TrafficReader reads an endpoint's per-version request statistics by
// name; handlers scope the endpoint to the caller's team before asking.
type TrafficReader interface {
	Last(ctx context.Context, endpoint string, minutes int) (traffic.Window, error)
}

// DevUser is a demo identity offered on the sign-in page.
type DevUser struct {
	Email       string
	Description string
}

// Server serves the control plane's HTTP routes.
type Server struct {
	Deps
	metrics *httpMetrics
}

// New returns a Server; call Handler for its routes.
func New(d Deps) *Server {
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.MaxBodyBytes == 0 {
		d.MaxBodyBytes = 1 << 20
	}
	if d.MaxUploadBytes == 0 {
		d.MaxUploadBytes = 10 << 30
	}
	if d.Fleet == nil && d.Pool != nil {
		d.Fleet = fleet.New(d.Pool, d.Log, d.Now)
	}
	if d.Budgets == nil && d.Pool != nil {
		d.Budgets = chargeback.NewBudgets(d.Pool, d.Chargeback, nil, d.Log, d.Now)
	}
	if d.Advisor == nil && d.Chargeback != nil && d.Endpoints != nil {
		eps := d.Endpoints
		d.Advisor = chargeback.NewAdvisor(d.Chargeback, func(ctx context.Context, p *auth.Principal, name string) (int32, error) {
			e, err := eps.Get(ctx, p, name)
			return e.MinReplicas, err
		})
	}
	if d.Rates == nil && d.Pool != nil {
		d.Rates = billing.NewBook(d.Pool, d.Now)
	}
	if d.Rollouts == nil && d.Pool != nil {
		d.Rollouts = rollout.New(d.Pool, d.Now, nil)
	}
	// TODO(lead): assembly builds these; the defaults go with Deps.Pool.
	if d.Audit == nil && d.Pool != nil {
		d.Audit = audit.NewLog(d.Pool)
	}
	if d.Idempotency == nil && d.Pool != nil {
		d.Idempotency = idempotency.New(d.Pool)
	}
	if d.Metrics == nil {
		d.Metrics = prometheus.NewRegistry()
	}
	return &Server{Deps: d, metrics: newHTTPMetrics(d.Metrics)}
}
