package tracing

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"

	"modelplane/internal/otlptest"
)

// capture is an OTLP/HTTP receiver that keeps each export's decoded body
// and answers the statuses in fail first, then 200.
type capture struct {
	mu      sync.Mutex
	got     []*coltracepb.ExportTraceServiceRequest
	headers []http.Header
	fail    []int
	answer  []byte
}

func (c *capture) start(t *testing.T) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body io.Reader = r.Body
		if r.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = zr
		}
		raw, err := io.ReadAll(body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var msg coltracepb.ExportTraceServiceRequest
		if err := proto.Unmarshal(raw, &msg); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		c.got = append(c.got, &msg)
		c.headers = append(c.headers, r.Header.Clone())
		if len(c.fail) > 0 {
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(c.fail[0])
			c.fail = c.fail[1:]
			return
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(c.answer)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// sampleSpans are spans with every field the protocol carries: attributes
// of each type, events, links, status, trace state, a remote parent, two
// resources and two scopes.
func sampleSpans(t *testing.T) []sdktrace.ReadOnlySpan {
	t.Helper()
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	ts, err := trace.ParseTraceState("vendor=abc,other=1")
	if err != nil {
		t.Fatal(err)
	}
	sc := func(sid string, remote bool, state trace.TraceState) trace.SpanContext {
		id, _ := trace.SpanIDFromHex(sid)
		return trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: id, TraceFlags: trace.FlagsSampled, TraceState: state, Remote: remote})
	}
	gw := resource.NewSchemaless(attribute.String("service.name", "modelplane-gateway"), attribute.Int("pid", 7))
	rt := resource.NewWithAttributes("https://opentelemetry.io/schemas/1.37.0", attribute.String("service.name", "modelplane-runtime"))
	start := time.Date(2026, 12, 5, 7, 0, 0, 123, time.UTC)
	stubs := tracetest.SpanStubs{
		{
			Name: "ml_serving.request", SpanContext: sc("00f067aa0ba902b7", false, ts), Parent: sc("1111111111111111", true, trace.TraceState{}),
			SpanKind: trace.SpanKindServer, StartTime: start, EndTime: start.Add(1500 * time.Microsecond),
			Attributes: []attribute.KeyValue{
				attribute.String("endpoint", "fraud-scoring"), attribute.Int("http.response.status_code", 503), attribute.Bool("retried", true),
				attribute.Float64("score", 0.25), attribute.StringSlice("tags", []string{"a", "b"}), attribute.Int64Slice("ids", []int64{1, -2}),
				attribute.BoolSlice("flags", []bool{true, false}), attribute.Float64Slice("ws", []float64{0.5}),
				attribute.ByteSlice("raw", []byte{0, 1, 2}), attribute.Slice("mixed", attribute.StringValue("x"), attribute.IntValue(3)),
				attribute.Map("m", attribute.String("k", "v")), attribute.KeyValue{Key: "empty", Value: attribute.Value{}},
				// Either side of the one-pass path for messages under 128
				// bytes: 127 and 128 bytes long, a negative integer (ten
				// bytes), false, an empty string and a 128-byte key.
				attribute.String("s", strings.Repeat("x", 120)), attribute.String("t", strings.Repeat("x", 121)),
				attribute.Int64("neg", -1), attribute.Bool("no", false), attribute.String("blank", ""),
				attribute.Int(strings.Repeat("k", 128), 1),
			},
			DroppedAttributes: 2,
			Events: []sdktrace.Event{
				{Name: "ml_serving.authn", Time: start.Add(10 * time.Microsecond)},
				{Name: "first_event", Time: start.Add(time.Millisecond), Attributes: []attribute.KeyValue{attribute.Int("tokens", 4)}, DroppedAttributeCount: 1},
			},
			DroppedEvents:        3,
			Links:                []sdktrace.Link{{SpanContext: sc("2222222222222222", false, trace.TraceState{}), Attributes: []attribute.KeyValue{attribute.String("why", "retry")}, DroppedAttributeCount: 1}},
			DroppedLinks:         1,
			Status:               sdktrace.Status{Code: codes.Error, Description: "Service Unavailable"},
			Resource:             gw,
			InstrumentationScope: instrumentation.Scope{Name: "modelplane/gateway", Version: "1", Attributes: attribute.NewSet(attribute.String("a", "b"))},
		},
		{
			Name: "ml_serving.scale_from_zero_wait", SpanContext: sc("3333333333333333", false, trace.TraceState{}), Parent: sc("00f067aa0ba902b7", false, trace.TraceState{}),
			SpanKind: trace.SpanKindInternal, StartTime: start, EndTime: start.Add(time.Second), Status: sdktrace.Status{Code: codes.Ok},
			Resource: gw, InstrumentationScope: instrumentation.Scope{Name: "modelplane/hold"},
		},
		{
			Name: "ml_serving.runtime", SpanContext: sc("4444444444444444", false, trace.TraceState{}), Parent: sc("00f067aa0ba902b7", true, trace.TraceState{}),
			StartTime: start, EndTime: start.Add(time.Millisecond), Resource: rt,
			InstrumentationScope: instrumentation.Scope{Name: "modelplane/runtime", SchemaURL: "https://opentelemetry.io/schemas/1.37.0"},
		},
		{
			Name: "no scope", SpanContext: sc("5555555555555555", false, trace.TraceState{}), StartTime: start, EndTime: start, Resource: gw,
		},
	}
	return stubs.Snapshots()
}

// bodyOf exports spans with exp to a fresh capture and returns what it
// received, its ResourceSpans in service order.
func bodyOf(t *testing.T, spans []sdktrace.ReadOnlySpan, newExp func(url string) sdktrace.SpanExporter) *coltracepb.ExportTraceServiceRequest {
	t.Helper()
	c := &capture{}
	exp := newExp(c.start(t) + "/v1/traces")
	if err := exp.ExportSpans(context.Background(), spans); err != nil {
		t.Fatal(err)
	}
	_ = exp.Shutdown(context.Background())
	if len(c.got) != 1 {
		t.Fatalf("%d exports, want 1", len(c.got))
	}
	msg := c.got[0]
	sortResources(msg)
	return msg
}

// TestEncodeMatchesTheStockExporter: what the exporter sends decodes, with
// the OpenTelemetry project's protocol types, to exactly what the
// project's own OTLP/HTTP exporter sends for the same spans; and it keeps
// a link's trace state, which the stock one drops.
func TestEncodeMatchesTheStockExporter(t *testing.T) {
	t.Parallel()
	spans := sampleSpans(t)
	ours := bodyOf(t, spans, func(u string) sdktrace.SpanExporter {
		x, err := newHTTPExporter(func(k string) string { return map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": u}[k] })
		if err != nil {
			t.Fatal(err)
		}
		return x
	})
	stock := bodyOf(t, spans, func(u string) sdktrace.SpanExporter {
		x, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(u))
		if err != nil {
			t.Fatal(err)
		}
		return x
	})
	if len(ours.GetResourceSpans()) != 2 {
		t.Fatalf("%d resources, want the gateway's and the runtime's", len(ours.GetResourceSpans()))
	}
	if !proto.Equal(stock, ours) {
		t.Errorf("our export differs from the stock exporter's:\nstock: %s\nours:  %s", prototext.Format(stock), prototext.Format(ours))
	}
}

// TestLinkTraceState: a link's trace state is sent.
func TestLinkTraceState(t *testing.T) {
	t.Parallel()
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	ts, _ := trace.ParseTraceState("vendor=abc")
	link := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceState: ts})
	spans := tracetest.SpanStubs{{Name: "s", SpanContext: link, Links: []sdktrace.Link{{SpanContext: link}}}}.Snapshots()
	var e encoder
	var msg coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(e.encode(spans), &msg); err != nil {
		t.Fatal(err)
	}
	if got := msg.ResourceSpans[0].ScopeSpans[0].Spans[0].Links[0].TraceState; got != "vendor=abc" {
		t.Errorf("link trace state %q, want vendor=abc", got)
	}
}

func sortResources(m *coltracepb.ExportTraceServiceRequest) {
	name := func(rs *tracepb.ResourceSpans) string {
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.GetKey() == "service.name" {
				return kv.GetValue().GetStringValue()
			}
		}
		return ""
	}
	slices.SortFunc(m.ResourceSpans, func(a, b *tracepb.ResourceSpans) int { return strings.Compare(name(a), name(b)) })
	for _, rs := range m.ResourceSpans {
		slices.SortFunc(rs.ScopeSpans, func(a, b *tracepb.ScopeSpans) int {
			return strings.Compare(a.GetScope().GetName(), b.GetScope().GetName())
		})
	}
}

// TestExportRetriesWithHeadersAndGzip: an export the receiver answers 503
// (then 429) is sent again, gzipped, with the configured headers, until
// it is taken; a receiver's partial success is an error naming the
// rejected spans; a 400 is not retried.
func TestExportRetriesWithHeadersAndGzip(t *testing.T) {
	t.Parallel()
	partial, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{PartialSuccess: &coltracepb.ExportTracePartialSuccess{RejectedSpans: 2, ErrorMessage: "too old"}})
	c := &capture{fail: []int{http.StatusServiceUnavailable, http.StatusTooManyRequests}, answer: partial}
	u := c.start(t)
	env := map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": u + "/", "OTEL_EXPORTER_OTLP_HEADERS": "x-tenant=team%20a, authorization=Bearer t0k",
		"OTEL_EXPORTER_OTLP_TRACES_COMPRESSION": "gzip", "OTEL_EXPORTER_OTLP_COMPRESSION": "bogus-but-overridden"}
	x, err := newHTTPExporter(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	spans := sampleSpans(t)
	err = x.ExportSpans(context.Background(), spans)
	if err == nil || !strings.Contains(err.Error(), "rejected 2 spans: too old") {
		t.Errorf("export = %v, want the partial success's rejection", err)
	}
	c.mu.Lock()
	if len(c.got) != 3 {
		t.Fatalf("%d attempts, want 3 (503, 429, 200)", len(c.got))
	}
	for i, h := range c.headers {
		if h.Get("X-Tenant") != "team a" || h.Get("Authorization") != "Bearer t0k" || h.Get("Content-Encoding") != "gzip" {
			t.Errorf("attempt %d headers %v, want the configured ones and gzip", i, h)
		}
		if n := len(c.got[i].GetResourceSpans()); n != 2 {
			t.Errorf("attempt %d carried %d resources, want 2", i, n)
		}
	}
	c.fail = []int{http.StatusBadRequest, http.StatusServiceUnavailable}
	c.mu.Unlock()
	if err := x.ExportSpans(context.Background(), spans); err == nil || !strings.Contains(err.Error(), "400") {
		t.Errorf("export to a 400 = %v, want that error", err)
	}
	c.mu.Lock()
	if len(c.got) != 4 {
		t.Errorf("%d attempts after a 400, want 1 more", len(c.got)-3)
	}
	c.mu.Unlock()
	_ = x.Shutdown(context.Background())
	if err := x.ExportSpans(context.Background(), spans); err == nil {
		t.Error("export after shutdown succeeded")
	}
}

// TestExportsToTheReceiver: a provider built from the environment sends
// its spans to the OTLP receiver tests use, which decodes them with the
// project's protocol types.
func TestExportsToTheReceiver(t *testing.T) {
	t.Parallel()
	r := otlptest.Start(t)
	env := map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": r.URL, "OTEL_EXPORTER_OTLP_COMPRESSION": "gzip"}
	p, err := fromEnv(context.Background(), "modelplane-test", func(k string) string { return env[k] })
	if err != nil || !p.On {
		t.Fatalf("fromEnv = %+v, %v; want on", p, err)
	}
	ctx, parent := p.Tracer("t").Start(context.Background(), "parent")
	_, child := p.Tracer("t").Start(ctx, "child")
	child.End()
	parent.End()
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	id := parent.SpanContext().TraceID().String()
	want := []otlptest.Span{
		{Service: "modelplane-test", Name: "child", TraceID: id, SpanID: child.SpanContext().SpanID().String(), ParentSpanID: parent.SpanContext().SpanID().String()},
		{Service: "modelplane-test", Name: "parent", TraceID: id, SpanID: parent.SpanContext().SpanID().String()},
	}
	if got := r.Trace(id); !slices.Equal(got, want) {
		t.Errorf("received %+v, want %+v", got, want)
	}
}

func TestHTTPConfigRefusesBadSettings(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		env  map[string]string
		want string
	}{
		{"an endpoint without a scheme", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4318"}, "http:// or https://"},
		{"a timeout that is no number", map[string]string{"OTEL_EXPORTER_OTLP_TIMEOUT": "10s"}, "OTEL_EXPORTER_OTLP_TIMEOUT"},
		{"an unknown compression", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_COMPRESSION": "zstd"}, "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION"},
		{"a header without a value", map[string]string{"OTEL_EXPORTER_OTLP_HEADERS": "a=1,b"}, "OTEL_EXPORTER_OTLP_HEADERS"},
		{"a missing certificate file", map[string]string{"OTEL_EXPORTER_OTLP_CERTIFICATE": "/nonexistent/ca.pem"}, "OTEL_EXPORTER_OTLP_CERTIFICATE"},
		{"a client certificate without its key", map[string]string{"OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE": "/x.pem"}, "go together"},
	} {
		_, err := newHTTPExporter(func(k string) string { return tt.env[k] })
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: err = %v, want one naming %q", tt.name, err, tt.want)
		}
	}
	cfg, err := httpConfigFrom(func(k string) string {
		return map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318/base", "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": "250"}[k]
	})
	if err != nil || cfg.url != "http://c:4318/base/v1/traces" || cfg.timeout != 250*time.Millisecond {
		t.Errorf("config %+v, %v; want the endpoint's /v1/traces and a 250ms timeout", cfg, err)
	}
}

// TestExportBodyIsNotReusedWhileSent: the exporter posts its encoder's
// buffer itself, no copy, and encodes the next batch into it only after
// the transport has closed the last request's body, which net/http's
// RoundTripper contract lets it read after answering. A transport that
// reads each body only after it answered receives every batch, gzipped
// and not, as it was encoded (and -race reports a batch written into the
// buffer while the transport reads it).
func TestExportBodyIsNotReusedWhileSent(t *testing.T) {
	t.Parallel()
	for _, compression := range []string{"none", "gzip"} {
		t.Run(compression, func(t *testing.T) {
			t.Parallel()
			env := map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://localhost:4318", "OTEL_EXPORTER_OTLP_COMPRESSION": compression}
			x, err := newHTTPExporter(func(k string) string { return env[k] })
			if err != nil {
				t.Fatal(err)
			}
			late := &lateReader{}
			x.client.Transport = late
			res := resource.NewSchemaless(attribute.String("service.name", "modelplane-gateway"))
			scope := instrumentation.Scope{Name: GatewayScope}
			var want [][]byte
			for i, s := range sampleRequests(t) {
				batch := []RequestSpan{s, s}
				var e encoder
				want = append(want, bytes.Clone(e.encodeRequests(res, scope, batch)))
				if err := x.exportRequests(context.Background(), res, scope, batch); err != nil {
					t.Fatalf("export %d: %v", i, err)
				}
			}
			late.wg.Wait()
			late.mu.Lock()
			defer late.mu.Unlock()
			if len(late.got) != len(want) {
				t.Fatalf("%d exports received, want %d", len(late.got), len(want))
			}
			for i := range want {
				got := late.got[i]
				if compression == "gzip" {
					zr, err := gzip.NewReader(bytes.NewReader(got))
					if err != nil {
						t.Fatal(err)
					}
					if got, err = io.ReadAll(zr); err != nil {
						t.Fatal(err)
					}
				}
				if !bytes.Equal(got, want[i]) {
					t.Errorf("export %d received %d bytes unlike the %d encoded", i, len(got), len(want[i]))
				}
			}
		})
	}
}

// lateReader is an http.RoundTripper that answers 200 at once and reads
// the request's body afterwards, then closes it, as the contract allows.
type lateReader struct {
	wg  sync.WaitGroup
	mu  sync.Mutex
	got [][]byte
}

func (l *lateReader) RoundTrip(r *http.Request) (*http.Response, error) {
	l.wg.Go(func() {
		b, _ := io.ReadAll(r.Body)
		_ = r.Body.Close()
		l.mu.Lock()
		l.got = append(l.got, b)
		l.mu.Unlock()
	})
	return &http.Response{StatusCode: http.StatusOK, Status: "200 OK", Header: http.Header{}, Body: http.NoBody, Request: r}, nil
}
