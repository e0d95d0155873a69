package handlers

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/coder/quartz"
	"go.opentelemetry.io/otel/trace"

	"modelplane/services"
	"modelplane/tracing"
)

// Pinger reports whether a dependency is reachable, for /readyz.
type Pinger interface {
	Ping(ctx context.Context) error
}

// Deps are what the handlers need: the control plane's services, built
// once by package controlplane and taken whole, and the HTTP layer's
// settings. Set is required, and so is every setting unless its comment
// says what its zero value means.
type Deps struct {
	// Set is the domain services. A nil service in it makes its pages and
	// API answer that it is unavailable (services.Set says which may be
	// nil); a nil Enrollment also leaves artifact fetches to AgentToken.
	*services.Set
	// Clock is the HTTP layer's clock: request durations, the chargeback
	// and drift windows, and the event streams' polling (nil: the real
	// clock).
	Clock quartz.Clock
	// GatewayURL is the inference gateway's base URL; "" makes the
	// endpoint page's Try it section say the gateway is not configured.
	GatewayURL string
	// GatewayKey is a platform API key the Try it section sends requests
	// with (modelplane dev sets one); "" shows only the curl command.
	GatewayKey string
	// AgentToken is the credential node agents present to fetch artifacts
	// (GET /internal/artifacts/{sha256}); "" refuses every agent.
	AgentToken string
	// PublicURL is the control plane's URL as nodes reach it, for the
	// join command line the portal shows; "" leaves --control-plane out.
	PublicURL string
	// Ready names the dependencies /readyz checks.
	Ready map[string]Pinger
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
	// Tracer traces every request (package tracing); nil traces nothing,
	// but a caller's traceparent still names the request's trace in its
	// log line and answer.
	Tracer trace.TracerProvider
}

// DefaultReadTimeout is ReadTimeout unless a caller needs another: far more
// than a JSON or form body of DefaultMaxBodyBytes takes.
const DefaultReadTimeout = 30 * time.Second

// DefaultMaxBodyBytes bounds a request body other than an upload unless
// the server is told otherwise.
const DefaultMaxBodyBytes = 1 << 20

// DevUser is a demo identity offered on the sign-in page.
type DevUser struct {
	Email       string
	Description string
}

// Server serves the control plane's HTTP routes.
type Server struct {
	Deps
	metrics *httpMetrics
	tracer  trace.Tracer
	// frameLoads and teamListLoads count the portal's page frames and the
	// switcher's team lists loaded since New, so tests hold a request to
	// one frame and at most one team list.
	frameLoads, teamListLoads atomic.Int64
}

// New returns a Server; call Handler for its routes.
func New(d Deps) *Server {
	if d.ReadTimeout <= 0 {
		d.ReadTimeout = DefaultReadTimeout
	}
	if d.Clock == nil {
		d.Clock = quartz.NewReal()
	}
	if d.Tracer == nil {
		d.Tracer = tracing.Off()
	}
	return &Server{Deps: d, metrics: newHTTPMetrics(d.Metrics), tracer: d.Tracer.Tracer("modelplane/controlplane")}
}
