package handlers

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// TestRequestLogLine: one JSON line per request with request id, route,
// status, duration, the authenticated user and the trace id of the
// caller's traceparent (tracing off, as here, still names it) — and never
// the key.
func TestRequestLogLine(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	var buf lockedBuffer
	e.srv.Log = slog.New(slog.NewJSONHandler(&buf, nil))
	key := e.Keys["risk-admin"]
	status, _ := e.api(key, http.MethodGet, "/endpoints/risk-endpoint", nil, "X-Request-Id", "req-123",
		"traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	if status != http.StatusOK {
		t.Fatalf("GET = %d", status)
	}
	buf.mu.Lock()
	out := buf.b.String()
	buf.mu.Unlock()
	if strings.Contains(out, key) {
		t.Fatalf("the API key was logged: %s", out)
	}
	var line map[string]any
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil && m["request_id"] == "req-123" {
			line = m
		}
	}
	if line == nil {
		t.Fatalf("no log line with request_id req-123 in %s", out)
	}
	for k, want := range map[string]any{"msg": "request", "route": "/api/v1/endpoints/{endpoint}", "status": float64(200), "teams": "risk",
		"trace_id": "4bf92f3577b34da6a3ce929d0e0e4736"} {
		if line[k] != want {
			t.Errorf("log %s = %v, want %v (line %v)", k, line[k], want, line)
		}
	}
	if u, _ := line["user"].(string); !strings.HasPrefix(u, "mpk_") {
		t.Errorf("log user = %q, want the key's public prefix", u)
	}
	if _, ok := line["duration"]; !ok {
		t.Errorf("log line has no duration: %v", line)
	}
}

// TestRequestSpan: with a tracer, each API call is one server span named
// for its method and route pattern (never the path, which holds the
// endpoint's name), a child of the caller's traceparent, with the route
// and status as attributes, its trace named in the answer's traceparent
// and in the log line; a call without a traceparent starts a trace.
func TestRequestSpan(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	e := newTestEnvWith(t, envOptions{Deps: func(d *Deps, _ *pgxpool.Pool) {
		d.Tracer = sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	}})
	var buf lockedBuffer
	e.srv.Log = slog.New(slog.NewJSONHandler(&buf, nil))
	const callerTrace, callerSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	req, err := http.NewRequest(http.MethodGet, e.URL+"/api/v1/endpoints/risk-endpoint", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+e.Keys["risk-admin"])
	req.Header.Set("traceparent", "00-"+callerTrace+"-"+callerSpan+"-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET = %d", resp.StatusCode)
	}
	var spans []tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		if s.SpanContext.TraceID().String() == callerTrace {
			spans = append(spans, s)
		}
	}
	if len(spans) != 1 {
		t.Fatalf("%d spans in the caller's trace, want 1: %v", len(spans), spans)
	}
	s := spans[0]
	if s.Name != "GET /api/v1/endpoints/{endpoint}" || s.SpanKind != trace.SpanKindServer || s.Parent.SpanID().String() != callerSpan {
		t.Errorf("span %q kind %v parent %s, want server span GET /api/v1/endpoints/{endpoint} under the caller's %s",
			s.Name, s.SpanKind, s.Parent.SpanID(), callerSpan)
	}
	attrs := map[string]string{}
	for _, a := range s.Attributes {
		attrs[string(a.Key)] = a.Value.String()
		if strings.Contains(a.Value.String(), "risk-endpoint") {
			t.Errorf("attribute %s = %q names the endpoint the user chose", a.Key, a.Value.String())
		}
	}
	for k, want := range map[string]string{"http.request.method": "GET", "http.route": "/api/v1/endpoints/{endpoint}", "http.response.status_code": "200"} {
		if attrs[k] != want {
			t.Errorf("attribute %s = %q, want %q", k, attrs[k], want)
		}
	}
	if got, want := resp.Header.Get("traceparent"), "00-"+callerTrace+"-"+s.SpanContext.SpanID().String()+"-01"; got != want {
		t.Errorf("answer traceparent %q, want the request's span %q", got, want)
	}
	buf.mu.Lock()
	logged := strings.Contains(buf.b.String(), `"trace_id":"`+callerTrace+`"`)
	buf.mu.Unlock()
	if !logged {
		t.Errorf("no log line with trace_id %s", callerTrace)
	}

	// Without a traceparent the call is the root of a trace of its own.
	if status, _ := e.api(e.Keys["risk-admin"], http.MethodGet, "/endpoints", nil); status != http.StatusOK {
		t.Fatalf("GET /endpoints = %d", status)
	}
	var root *tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		if s.Name == "GET /api/v1/endpoints" {
			root = &s
		}
	}
	if root == nil || root.Parent.IsValid() {
		t.Errorf("span of GET /endpoints %+v, want a root span", root)
	}
}
