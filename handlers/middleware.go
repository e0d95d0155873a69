package handlers

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"modelplane/auth"
	"modelplane/tracing"
)

// serverKind is the span kind of every request's span, built once.
var serverKind = trace.WithSpanKind(trace.SpanKindServer)

type ctxKey int

const (
	keyPrincipal ctxKey = iota
	keyRequestID
	keyFrame
	keyPrincipalHolder
	keyRemoteHost
)

// principal returns the authenticated caller; routes behind the auth
// middleware always have one.
func principal(ctx context.Context) *auth.Principal {
	p, _ := ctx.Value(keyPrincipal).(*auth.Principal)
	return p
}

func withPrincipal(ctx context.Context, p *auth.Principal) context.Context {
	return context.WithValue(ctx, keyPrincipal, p)
}

func requestID(ctx context.Context) string {
	id, _ := ctx.Value(keyRequestID).(string)
	return id
}

type httpMetrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

func newHTTPMetrics(reg *prometheus.Registry) *httpMetrics {
	m := &httpMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "mp_http_requests_total", Help: "HTTP requests by route and status."}, []string{"route", "method", "status"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "mp_http_request_duration_seconds", Help: "HTTP request duration by route.", Buckets: prometheus.DefBuckets}, []string{"route", "method"}),
	}
	reg.MustRegister(m.requests, m.duration)
	return m
}

// observe assigns a request id, recovers panics, traces the request (a
// server span named for its route, the caller's traceparent its parent),
// and writes one log line, with the trace id, and the metrics per request.
// Payloads, tokens and cookies are never logged, nor put in spans.
func (s *Server) observe(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := s.Clock.Now()
		id := r.Header.Get("X-Request-Id")
		if id == "" || len(id) > 64 {
			b := make([]byte, 8)
			_, _ = rand.Read(b)
			id = hex.EncodeToString(b)
		}
		w.Header().Set("X-Request-Id", id)
		// The span is named for the route once it is known (the route
		// pattern, never the path, which holds names users chose).
		ctx, span := s.tracer.Start(tracing.Extract(r.Context(), r.Header), r.Method, serverKind)
		sc := span.SpanContext()
		traceID := ""
		if sc.IsValid() {
			traceID = sc.TraceID().String()
			w.Header().Set("traceparent", tracing.Traceparent(sc))
		}
		ctx = context.WithValue(ctx, keyRequestID, id)
		ww := middleware.NewWrapResponseWriter(w, r.ProtoMajor)
		holder := &principalHolder{}
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				s.Log.ErrorContext(ctx, "panic", slog.Any("panic", v), slog.String("request_id", id))
				if ww.Status() == 0 {
					writeProblem(ww, http.StatusInternalServerError, "internal error")
				}
			}
			route := chi.RouteContext(ctx).RoutePattern()
			if route == "" {
				route = "unmatched"
			}
			status := ww.Status()
			if status == 0 {
				status = http.StatusOK
			}
			d := s.Clock.Now().Sub(start)
			s.metrics.requests.WithLabelValues(route, r.Method, strconv.Itoa(status)).Inc()
			hist := s.metrics.duration.WithLabelValues(route, r.Method)
			if eo, ok := hist.(prometheus.ExemplarObserver); ok && traceID != "" {
				eo.ObserveWithExemplar(d.Seconds(), prometheus.Labels{"trace_id": traceID})
			} else {
				hist.Observe(d.Seconds())
			}
			span.SetName(r.Method + " " + route)
			span.SetAttributes(attribute.String("http.request.method", r.Method), attribute.String("http.route", route),
				attribute.Int("http.response.status_code", status))
			if status >= 500 {
				span.SetStatus(codes.Error, http.StatusText(status))
			}
			span.End()
			attrs := []slog.Attr{slog.String("request_id", id), slog.String("method", r.Method), slog.String("route", route),
				slog.Int("status", status), slog.Duration("duration", d), slog.String("trace_id", traceID)}
			if p := holder.p; p != nil {
				attrs = append(attrs, slog.String("user", p.Name), slog.String("teams", teamNames(p)))
			}
			s.Log.LogAttrs(ctx, slog.LevelInfo, "request", attrs...)
		}()
		next.ServeHTTP(ww, r.WithContext(context.WithValue(ctx, keyPrincipalHolder, holder)))
	})
}

// principalHolder lets the outer logging middleware learn the principal that
// an inner middleware authenticated.
type principalHolder struct{ p *auth.Principal }

func setPrincipal(r *http.Request, p *auth.Principal) *http.Request {
	if h, ok := r.Context().Value(keyPrincipalHolder).(*principalHolder); ok {
		h.p = p
	}
	return r.WithContext(withPrincipal(r.Context(), p))
}

func teamNames(p *auth.Principal) string {
	if p.PlatformRole != "" {
		return string(p.PlatformRole)
	}
	names := make([]string, len(p.Teams))
	for i, m := range p.Teams {
		names[i] = m.Team
	}
	return strings.Join(names, ",")
}

// securityHeaders sets the headers every response carries. The CSP allows
// only our own scripts and styles: no inline script, no eval.
func securityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'self'; form-action 'self'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "same-origin")
		h.Set("X-Frame-Options", "DENY")
		next.ServeHTTP(w, r)
	})
}

// credentialParams are query parameters that would carry a secret; the API
// refuses them so keys never land in access logs or browser history.
var credentialParams = []string{"api_key", "apikey", "key", "token", "access_token", "auth"}

// apiAuth authenticates API calls by bearer token: an API key or an OIDC
// token. Cookies are not accepted on the API.
func (s *Server) apiAuth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		for _, name := range credentialParams {
			if q.Has(name) {
				writeProblem(w, http.StatusBadRequest, "credentials in the query string are refused; send Authorization: Bearer <key>")
				return
			}
		}
		if strings.HasPrefix(r.URL.Path, "/api/v1/openapi") || r.URL.Path == cliLoginPath {
			next.ServeHTTP(w, r)
			return
		}
		if slices.Contains(nodeAgentRoutes, r.Method+" "+r.URL.Path) {
			// The agent's own token, checked by the operation.
			next.ServeHTTP(w, withRemoteHost(r))
			return
		}
		token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || token == "" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="modelplane"`)
			writeProblem(w, http.StatusUnauthorized, "authentication required: send Authorization: Bearer <key>")
			return
		}
		var p *auth.Principal
		var err error
		switch {
		case auth.LooksLikeKey(token):
			p, err = s.Keys.Authenticate(r.Context(), token)
		case s.OIDC != nil:
			p, err = s.OIDC.AuthenticateToken(r.Context(), token)
		default:
			err = auth.ErrUnauthenticated
		}
		if err != nil {
			if !errors.Is(err, auth.ErrUnauthenticated) {
				s.Log.ErrorContext(r.Context(), "authenticate", slog.String("error", err.Error()), slog.String("request_id", requestID(r.Context())))
				writeProblem(w, http.StatusInternalServerError, "internal error")
				return
			}
			w.Header().Set("WWW-Authenticate", `Bearer realm="modelplane", error="invalid_token"`)
			writeProblem(w, http.StatusUnauthorized, "invalid, expired or revoked credentials")
			return
		}
		next.ServeHTTP(w, setPrincipal(r, p))
	})
}

// readDeadline bounds reading the request body to ReadTimeout from now,
// and only that: the deadline is lifted once the body is read to its end,
// and a request without a body gets none. The server has no ReadTimeout of
// its own because uploads and event streams must not have one; they opt
// out with keepReading.
//
// The deadline must not outlive the body. On HTTP/1 the server keeps
// reading the connection while the handler runs, to notice the client
// leave; a deadline passing there cancels the connection's context, and
// with it the context of that request and of every later request on the
// same keep-alive connection, which then fail at once with "context
// canceled" (TestReadDeadlineEndsWithTheBody). One slow page poisoned
// every page its browser loaded next over that connection.
func (s *Server) readDeadline(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody {
			next.ServeHTTP(w, r)
			return
		}
		// An error means the writer cannot set deadlines (a test recorder);
		// there is no connection to bound then. The deadline is the
		// connection's, kept by the runtime's network poller in wall-clock
		// time, so it is read from the real clock, not s.Clock.
		rc := http.NewResponseController(w)
		if rc.SetReadDeadline(time.Now().Add(s.ReadTimeout)) == nil {
			r.Body = &deadlineBody{ReadCloser: r.Body, rc: rc}
		}
		next.ServeHTTP(w, r)
	})
}

// deadlineBody lifts the connection's read deadline when a read reaches
// the body's end (io.EOF), where the server starts its background read. A
// body left unread, or cut by the deadline, keeps it: the server starts
// no background read then, and its discard of what is left must stay
// bounded (TestSlowBodyIsCut).
type deadlineBody struct {
	io.ReadCloser
	rc   *http.ResponseController
	once sync.Once
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if errors.Is(err, io.EOF) {
		b.once.Do(func() { _ = b.rc.SetReadDeadline(time.Time{}) })
	}
	return n, err
}

// keepReading lifts readDeadline for an upload, whose body may take as
// long as its size needs. (An event stream is a GET without a body, which
// readDeadline leaves without a deadline.)
func keepReading(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = http.NewResponseController(w).SetReadDeadline(time.Time{})
		next.ServeHTTP(w, r)
	})
}

// limitBody bounds every request body; the upload route sets its own bound.
func limitBody(n int64) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Body != nil {
				r.Body = http.MaxBytesReader(w, r.Body, n)
			}
			next.ServeHTTP(w, r)
		})
	}
}
