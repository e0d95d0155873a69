package gateway_test

import (
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"modelplane/gateway"
	"modelplane/internal/promcheck"
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

// TestRequestTrace: one predict makes one trace of two spans:
// ml_serving.request, whose events are the seed's steps in order (each
// stamped when its step ended, within the request) and whose attributes
// say where it went, and the call to the replica as its child; the
// caller's traceparent is the request's parent, the trace's traceparent
// is in the answer, and the replica continues the same trace under the
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
	if len(spans) != 2 {
		t.Errorf("%d spans, want 2 (the request and its call to the replica): %v", len(spans), slices.Collect(maps.Keys(byName)))
	}
	root, ok := byName["ml_serving.request"]
	if !ok {
		t.Fatalf("no ml_serving.request span among %d", len(spans))
	}
	if root.Parent.SpanID().String() != "00f067aa0ba902b7" {
		t.Errorf("root's parent %s, want the caller's span", root.Parent.SpanID())
	}
	var events []string
	prev := root.StartTime
	for _, ev := range root.Events {
		events = append(events, ev.Name)
		if ev.Time.Before(prev) || ev.Time.After(root.EndTime) {
			t.Errorf("event %s at %v, want after the step before (%v) and within the request (ends %v)", ev.Name, ev.Time, prev, root.EndTime)
		}
		prev = ev.Time
	}
	want := []string{"ml_serving.authn", "ml_serving.schema_validation", "ml_serving.rate_limit_check", "ml_serving.traffic_routing"}
	if !slices.Equal(events, want) {
		t.Errorf("request's events %v, want the seed's steps %v", events, want)
	}
	attrs := map[string]string{}
	for _, a := range root.Attributes {
		attrs[string(a.Key)] = a.Value.String()
	}
	for k, v := range map[string]string{"endpoint": "fraud-scoring", "version": "v23", "http.response.status_code": "200",
		"request_id": r.header.Get("X-Request-Id")} {
		if attrs[k] != v {
			t.Errorf("request's attribute %s = %q, want %q", k, attrs[k], v)
		}
	}
	if attrs["replica"] == "" {
		t.Error("request's span names no replica")
	}
	if _, ok := attrs["pinned"]; ok {
		t.Error("an unpinned request's span says pinned")
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

// TestExemplarCarriesTraceID: a request that came with a traceparent,
// unsampled and through a gateway that traces nothing, leaves its trace
// id as the exemplar of its bucket of the request duration and overhead
// histograms, which an OpenMetrics scrape shows; an untraced request
// leaves none.
func TestExemplarCarriesTraceID(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rep := &tracedReplica{}
	e.putRoute(t, route("fraud-scoring", "risk", "classification", 1, ver("v23", 100, rep.start(t))))
	key := e.newKey(t, "risk", "engineer", nil)
	g := startGateway(t, e.nc, gateway.Config{})
	wait.Eventually(t, 10*time.Second, g.Ready, "waiting for gateway ready")

	scrape := func(accept string) (string, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, g.adminURL+"/metrics", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Accept", accept)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.Header.Get("Content-Type"), string(b)
	}
	const openMetrics = "application/openmetrics-text; version=1.0.0"
	if r := call(t, g.url, predictPath("fraud-scoring"), key, predictBody); r.status != http.StatusOK {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	if _, text := scrape(openMetrics); strings.Contains(text, "trace_id") {
		t.Fatalf("an untraced request left an exemplar:\n%s", text)
	}
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	r := call(t, g.url, predictPath("fraud-scoring"), key, predictBody, "traceparent", "00-"+traceID+"-00f067aa0ba902b7-00")
	if r.status != http.StatusOK {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	ctype, text := scrape(openMetrics)
	if !strings.HasPrefix(ctype, "application/openmetrics-text") {
		t.Fatalf("Content-Type %q, want OpenMetrics", ctype)
	}
	for _, family := range []string{"ml_serving_request_duration_seconds_bucket", "ml_serving_platform_overhead_seconds_bucket"} {
		found := false
		for line := range strings.Lines(text) {
			if strings.HasPrefix(line, family+"{") && strings.Contains(line, `endpoint="fraud-scoring"`) &&
				strings.Contains(line, ` # {trace_id="`+traceID+`"} `) {
				found = true
			}
		}
		if !found {
			t.Errorf("no bucket of %s has the exemplar trace_id=%s:\n%s", family, traceID, text)
		}
	}
	if !strings.HasSuffix(text, "# EOF\n") {
		t.Errorf("OpenMetrics answer does not end with # EOF")
	}
	// A scraper that does not ask for OpenMetrics gets the text format,
	// without exemplars, that promtool checks.
	if _, plain := scrape("text/plain"); strings.Contains(plain, "trace_id") {
		t.Errorf("text format carries exemplars")
	} else {
		promcheck.Metrics(t, plain)
	}
}
