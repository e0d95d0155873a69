package gateway_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"modelplane/gateway"
	"modelplane/internal/promcheck"
	"modelplane/internal/wait"
	"modelplane/tracing"
)

// tracedReplica answers /predict and keeps the traceparent and
// tracestate of each call.
type tracedReplica struct {
	mu     sync.Mutex
	parent []string
	state  []string
}

func (tr *tracedReplica) start(t *testing.T) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tr.mu.Lock()
		tr.parent = append(tr.parent, r.Header.Get("traceparent"))
		tr.state = append(tr.state, r.Header.Get("tracestate"))
		tr.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"predictions":[{"label":"legit","score":0.1},{"label":"fraud","score":0.9}],"model_version":"v23"}`))
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// memoryTracing is the gateway's tracing as `modelplane gateway` sets it
// up, exporting to exp: request spans through a tracing.Recorder, child
// spans through the SDK. Read exp through flushed.
func memoryTracing(t *testing.T, exp *tracetest.InMemoryExporter) tracing.Provider {
	t.Helper()
	tp, err := tracing.New(t.Context(), exp, tracing.Options{Service: "modelplane-gateway"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp
}

// flushed exports what tp holds and returns every span exp has.
func flushed(t *testing.T, tp tracing.Provider, exp *tracetest.InMemoryExporter) tracetest.SpanStubs {
	t.Helper()
	if err := tp.ForceFlush(t.Context()); err != nil {
		t.Fatal(err)
	}
	return exp.GetSpans()
}

// TestRequestTrace: one predict makes one span, ml_serving.request, whose
// attributes say where the request went and how long each of the seed's
// steps and the replica call took (together within the request); the
// caller's traceparent is its parent, the trace's traceparent is in the
// answer, and the replica continues the same trace under the request's
// span, with the caller's tracestate.
func TestRequestTrace(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rep := &tracedReplica{}
	e.putRoute(t, route("fraud-scoring", "risk", "classification", 1, ver("v23", 100, rep.start(t))))
	key := e.newKey(t, "risk", "engineer", nil)
	exp := tracetest.NewInMemoryExporter()
	tp := memoryTracing(t, exp)
	g := startGateway(t, e.nc, gateway.Config{Tracer: tp})
	wait.Eventually(t, 10*time.Second, g.Ready, "waiting for gateway ready")

	const callerTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	r := call(t, g.url, predictPath("fraud-scoring"), key, predictBody, "traceparent", "00-"+callerTrace+"-00f067aa0ba902b7-01", "tracestate", "vendor=x")
	if r.status != http.StatusOK {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	spans := flushed(t, tp, exp)
	if len(spans) != 1 || spans[0].Name != "ml_serving.request" {
		t.Fatalf("spans %+v, want one ml_serving.request", spans)
	}
	root := spans[0]
	if root.SpanContext.TraceID().String() != callerTrace || root.Parent.SpanID().String() != "00f067aa0ba902b7" {
		t.Errorf("request span in trace %s under %s, want the caller's trace %s and span", root.SpanContext.TraceID(), root.Parent.SpanID(), callerTrace)
	}
	want := "00-" + callerTrace + "-" + root.SpanContext.SpanID().String() + "-01"
	if got := r.header.Get("traceparent"); got != want {
		t.Errorf("answer traceparent %q, want the request span's %q", got, want)
	}
	attrs := map[string]attribute.Value{}
	for _, a := range root.Attributes {
		attrs[string(a.Key)] = a.Value
	}
	for k, v := range map[string]string{"endpoint": "fraud-scoring", "version": "v23", "http.response.status_code": "200"} {
		if attrs[k].String() != v {
			t.Errorf("request's attribute %s = %q, want %q", k, attrs[k].String(), v)
		}
	}
	if attrs["replica"].AsString() == "" {
		t.Error("request's span names no replica")
	}
	if _, ok := attrs["pinned"]; ok {
		t.Error("an unpinned request's span says pinned")
	}
	if len(attrs) > 8 {
		t.Errorf("request span has %d attributes, want at most 8 (where it went, the steps and the replica call)", len(attrs))
	}
	var sum int64
	for _, k := range []string{"ml_serving.authn_us", "ml_serving.schema_validation_us", "ml_serving.traffic_routing_us", "ml_serving.model_inference_us"} {
		v, ok := attrs[k]
		if !ok || v.Type() != attribute.INT64 || v.AsInt64() < 0 {
			t.Errorf("request's attribute %s = %v, want the step's microseconds", k, v.String())
		}
		sum += v.AsInt64()
	}
	if total := root.EndTime.Sub(root.StartTime).Microseconds(); sum > total {
		t.Errorf("steps and replica call took %d µs, more than the request's %d µs", sum, total)
	}
	rep.mu.Lock()
	defer rep.mu.Unlock()
	if len(rep.parent) != 1 || rep.parent[0] != want || rep.state[0] != "vendor=x" {
		t.Errorf("replica got traceparent %v tracestate %v, want the request span's %s and vendor=x", rep.parent, rep.state, want)
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

// TestUnsampledRequestKeepsItsTraceID: a gateway tracing at ratio 0
// exports no request span, yet answers with the request's own
// traceparent, unsampled, and leaves that trace id as the exemplar of
// its bucket, so a slow or failed request can still be quoted.
func TestUnsampledRequestKeepsItsTraceID(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rep := &tracedReplica{}
	e.putRoute(t, route("fraud-scoring", "risk", "classification", 1, ver("v23", 100, rep.start(t))))
	key := e.newKey(t, "risk", "engineer", nil)
	exp := tracetest.NewInMemoryExporter()
	tp, err := tracing.New(t.Context(), exp, tracing.Options{Service: "modelplane-gateway", Sampler: sdktrace.ParentBased(sdktrace.TraceIDRatioBased(0))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	g := startGateway(t, e.nc, gateway.Config{Tracer: tp})
	wait.Eventually(t, 10*time.Second, g.Ready, "waiting for gateway ready")

	r := call(t, g.url, predictPath("fraud-scoring"), key, predictBody)
	if r.status != http.StatusOK {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	tp2 := r.header.Get("traceparent")
	parts := strings.Split(tp2, "-")
	if len(parts) != 4 || len(parts[1]) != 32 || parts[3] != "00" {
		t.Fatalf("answer traceparent %q, want the request's own, unsampled (flags 00)", tp2)
	}
	if spans := flushed(t, tp, exp); len(spans) != 0 {
		t.Errorf("exported %d spans at ratio 0, want none", len(spans))
	}
	rep.mu.Lock()
	if len(rep.parent) != 1 || rep.parent[0] != tp2 {
		t.Errorf("replica got %v, want the answer's %s", rep.parent, tp2)
	}
	rep.mu.Unlock()
	req, err := http.NewRequest(http.MethodGet, g.adminURL+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "application/openmetrics-text; version=1.0.0")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	text, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(text), `# {trace_id="`+parts[1]+`"} `) {
		t.Errorf("no exemplar names the unsampled request's trace id %s:\n%s", parts[1], text)
	}
}
