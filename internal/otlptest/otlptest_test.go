package otlptest

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
)

// TestReceivesTheSDKsExport: spans the OpenTelemetry SDK exports over
// OTLP/HTTP (gzip on, as collectors are usually fed) arrive with their
// service, ids and parent link; a JSON body is refused with 415.
func TestReceivesTheSDKsExport(t *testing.T) {
	t.Parallel()
	r := Start(t)
	ctx := context.Background()
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(r.URL+"/v1/traces"), otlptracehttp.WithCompression(otlptracehttp.GzipCompression))
	if err != nil {
		t.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithResource(resource.NewSchemaless(semconv.ServiceName("otlptest"))))
	pctx, parent := tp.Tracer("t").Start(ctx, "parent")
	_, child := tp.Tracer("t").Start(pctx, "child")
	child.End()
	parent.End()
	if err := tp.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	id := parent.SpanContext().TraceID().String()
	got := r.Trace(id)
	if len(got) != 2 {
		t.Fatalf("trace %s: %+v; want the two spans", id, r.Spans())
	}
	want := []Span{
		{Service: "otlptest", Name: "child", TraceID: id, SpanID: child.SpanContext().SpanID().String(), ParentSpanID: parent.SpanContext().SpanID().String()},
		{Service: "otlptest", Name: "parent", TraceID: id, SpanID: parent.SpanContext().SpanID().String()},
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("span %d = %+v, want %+v", i, got[i], want[i])
		}
	}

	resp, err := http.Post(r.URL+"/v1/traces", "application/json", strings.NewReader(`{"resourceSpans":[]}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnsupportedMediaType {
		t.Errorf("JSON export = %d, want 415", resp.StatusCode)
	}
}
