package handlers

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"modelplane/audit"
	"modelplane/auth"
	"modelplane/billing"
	"modelplane/chargeback"
	"modelplane/drift"
	"modelplane/endpoint"
	"modelplane/enrollment"
	"modelplane/fleet"
	"modelplane/idempotency"
	"modelplane/quota"
	"modelplane/registry"
	"modelplane/reqstats"
	"modelplane/rollout"
	"modelplane/tenant"
	"modelplane/trust"
)

// Pinger reports whether a dependency is reachable, for /readyz.
type Pinger interface {
	Ping(ctx context.Context) error
}

// Deps are what the handlers need: the control plane's services, built once
// by package controlplane, and the HTTP layer's settings. Every field is
// required unless its comment says what nil means; New fills nothing in.
type Deps struct {
	Log       *slog.Logger
	Keys      *auth.Keys
	OIDC      *auth.OIDC // nil disables SSO sign-in and bearer tokens
	Sessions  *auth.Sessions
	Tenant    *tenant.Service
	Registry  *registry.Service
	Endpoints *endpoint.Service
	Fleet     *fleet.Fleet
	Quotas    *quota.Service
	// Attestations keeps what platform admins attest each node has.
	Attestations *trust.Attestations
	Meter        *billing.Meter // nil: the fleet page shows no metered total
	// Rates is the cost-rate history.
	Rates *billing.Book
	// Chargeback reads usage and cost reports from ClickHouse; nil: the
	// chargeback API answers 503 and the portal page says it is unavailable.
	Chargeback *chargeback.Service
	// Budgets keeps monthly budgets and their alerts; nil: the budget API
	// answers 503 and the chargeback page shows none.
	Budgets *chargeback.Budgets
	// Advisor gives right-sizing advice; nil (no ClickHouse): none is shown.
	Advisor *chargeback.Advisor
	// Rollouts starts and drives rollouts.
	Rollouts *rollout.Service
	// Traffic reads the gateways' request statistics (a *reqstats.Reader
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
	// AgentToken is the credential node agents present to fetch artifacts
	// (GET /internal/artifacts/{sha256}); "" refuses every agent.
	AgentToken string
	// Enrollment enrolls, rotates and revokes nodes and checks their
	// artifact tokens; nil: the enrollment routes answer 503 and only
	// AgentToken fetches artifacts.
	Enrollment *enrollment.Service
	// PublicURL is the control plane's URL as nodes reach it, for the
	// join command line the portal shows; "" leaves --control-plane out.
	PublicURL string
	Ready     map[string]Pinger // name → dependency checked by /readyz
	// Metrics is the registry /metrics serves; the HTTP layer registers its
	// own collectors on it.
	Metrics *prometheus.Registry
	Now     func() time.Time
	// DevUsers, when set, are shown on the sign-in page (modelplane dev).
	DevUsers []DevUser
	// MaxUploadBytes bounds a version upload; other bodies are bounded by
	// MaxBodyBytes (DefaultMaxBodyBytes unless a caller needs another).
	MaxUploadBytes int64
	MaxBodyBytes   int64
	// ReadTimeout bounds how long reading a request body may take on every
	// route but uploads and event streams (0: DefaultReadTimeout), so a
	// client that sends a body slowly cannot hold a handler and its
	// connection open.
	ReadTimeout time.Duration
}

// DefaultReadTimeout is ReadTimeout unless a caller needs another: far more
// than a JSON or form body of DefaultMaxBodyBytes takes.
const DefaultReadTimeout = 30 * time.Second

// DefaultMaxBodyBytes bounds a request body other than an upload unless
// the server is told otherwise.
const DefaultMaxBodyBytes = 1 << 20

// TrafficReader reads an endpoint's per-version request statistics by
// name; handlers scope the endpoint to the caller's team before asking.
type TrafficReader interface {
	Last(ctx context.Context, endpoint string, endpointID int64, minutes int) (reqstats.Window, error)
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
	if d.ReadTimeout <= 0 {
		d.ReadTimeout = DefaultReadTimeout
	}
	return &Server{Deps: d, metrics: newHTTPMetrics(d.Metrics)}
}
