package gateway_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"modelplane/gateway"
	"modelplane/internal/wait"
)

// tracedReplica answers /predict and keeps the traceparent of each call.
type tracedReplica struct {
	mu     sync.Mutex
	parent []string
}

func (tr *tracedReplica) start(t *testing.T) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tr.mu.Lock()
		tr.parent = append(tr.parent, r.Header.Get("traceparent"))
		tr.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"predictions":[{"label":"legit","score":0.1},{"label":"fraud","score":0.9}],"model_version":"v23"}`))
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// TestRequestTrace: one predict makes one trace: ml_serving.request with
// the seed's steps as children in order, the call to the replica under
// it, the caller's traceparent as its parent, the trace's traceparent in
// the answer, and the replica continuing the same trace under the
// gateway's model_inference span.
func TestRequestTrace(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rep := &tracedReplica{}
	e.putRoute(t, route("fraud-scoring", "risk", "classification", 1, ver("v23", 100, rep.start(t))))
	key := e.newKey(t, "risk", "engineer", nil)
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	g := startGateway(t, e.nc, gateway.Config{Tracer: tp})
	wait.Eventually(t, 10*time.Second, g.Ready, "waiting for gateway ready")

	const callerTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	r := call(t, g.url, predictPath("fraud-scoring"), key, predictBody, "traceparent", "00-"+callerTrace+"-00f067aa0ba902b7-01")
	if r.status != http.StatusOK {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	if got := r.header.Get("traceparent"); !strings.HasPrefix(got, "00-"+callerTrace+"-") {
		t.Errorf("answer traceparent %q, want the caller's trace %s", got, callerTrace)
	}
	spans := exp.GetSpans()
	byName := map[string]tracetest.SpanStub{}
	for _, s := range spans {
		if s.SpanContext.TraceID().String() != callerTrace {
			t.Errorf("span %s in trace %s, want %s", s.Name, s.SpanContext.TraceID(), callerTrace)
		}
		byName[s.Name] = s
	}
	root, ok := byName["ml_serving.request"]
	if !ok {
		t.Fatalf("no ml_serving.request span among %d", len(spans))
	}
	if root.Parent.SpanID().String() != "00f067aa0ba902b7" {
		t.Errorf("root's parent %s, want the caller's span", root.Parent.SpanID())
	}
	prevEnd := root.StartTime
	for _, name := range []string{"ml_serving.authn", "ml_serving.schema_validation", "ml_serving.rate_limit_check", "ml_serving.traffic_routing"} {
		s, ok := byName[name]
		if !ok {
			t.Fatalf("no %s span", name)
		}
		if s.Parent.SpanID() != root.SpanContext.SpanID() {
			t.Errorf("%s's parent is not the request's span", name)
		}
		if !s.StartTime.Equal(prevEnd) || s.EndTime.Before(s.StartTime) || s.EndTime.After(root.EndTime) {
			t.Errorf("%s spans %v–%v, want to start where the step before ended (%v) and end within the request", name, s.StartTime, s.EndTime, prevEnd)
		}
		prevEnd = s.EndTime
	}
	inf, ok := byName["ml_serving.model_inference"]
	if !ok || inf.Parent.SpanID() != root.SpanContext.SpanID() {
		t.Fatalf("model_inference span %+v, want a child of the request's", inf)
	}
	rep.mu.Lock()
	defer rep.mu.Unlock()
	if len(rep.parent) != 1 || rep.parent[0] != "00-"+callerTrace+"-"+inf.SpanContext.SpanID().String()+"-01" {
		t.Errorf("replica got traceparent %v, want the model_inference span %s of trace %s", rep.parent, inf.SpanContext.SpanID(), callerTrace)
	}
}

// TestTraceparentPassedOnWithTracingOff: a gateway that traces nothing
// still passes the caller's trace to the replica and names it in its
// answer, so the runtime's spans join the caller's trace.
func TestTraceparentPassedOnWithTracingOff(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rep := &tracedReplica{}
	e.putRoute(t, route("fraud-scoring", "risk", "classification", 1, ver("v23", 100, rep.start(t))))
	key := e.newKey(t, "risk", "engineer", nil)
	g := startGateway(t, e.nc, gateway.Config{})
	wait.Eventually(t, 10*time.Second, g.Ready, "waiting for gateway ready")
	parent := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	r := call(t, g.url, predictPath("fraud-scoring"), key, predictBody, "traceparent", parent)
	if r.status != http.StatusOK || r.header.Get("traceparent") != parent {
		t.Fatalf("status %d traceparent %q, want 200 naming the caller's", r.status, r.header.Get("traceparent"))
	}
	rep.mu.Lock()
	if len(rep.parent) != 1 || rep.parent[0] != parent {
		t.Errorf("replica got %v, want %s", rep.parent, parent)
	}
	rep.mu.Unlock()
	r = call(t, g.url, predictPath("fraud-scoring"), key, predictBody)
	if r.header.Get("traceparent") != "" {
		t.Errorf("untraced request answered traceparent %q", r.header.Get("traceparent"))
	}
}
