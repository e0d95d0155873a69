package scratch

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"syscall"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

func cpu() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                          { return nil }

func shape(b *testing.B, tp *sdktrace.TracerProvider, full, child bool) {
	tr := tp.Tracer("x")
	ctx := context.Background()
	kind := trace.WithSpanKind(trace.SpanKindServer)
	b.ReportAllocs()
	c0 := cpu()
	for b.Loop() {
		start := time.Now()
		c, s := tr.Start(ctx, "ml_serving.request", kind, trace.WithTimestamp(start))
		if child {
			_, cs := tr.Start(c, "ml_serving.model_inference", trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attribute.String("selected_replica", "stable-0")))
			cs.End()
		}
		if full {
			for _, n := range []string{"ml_serving.authn", "ml_serving.schema_validation", "ml_serving.rate_limit_check", "ml_serving.traffic_routing"} {
				s.AddEvent(n, trace.WithTimestamp(start))
			}
			s.SetAttributes(attribute.String("endpoint", "bench"), attribute.String("version", "stable"), attribute.String("replica", "stable-0"), attribute.Int("http.response.status_code", 200), attribute.String("request_id", "0123456789abcdef0123"))
		}
		s.End(trace.WithTimestamp(start))
	}
	_ = tp.Shutdown(context.Background())
	b.StopTimer()
	b.ReportMetric(float64(cpu()-c0)/float64(b.N), "cpu-ns/op")
}

func sink(b *testing.B) string {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.Copy(io.Discard, r.Body) }))
	b.Cleanup(s.Close)
	return s.URL
}

func BenchmarkBareNoProcessor(b *testing.B) { shape(b, sdktrace.NewTracerProvider(), false, false) }
func BenchmarkBareSyncDiscard(b *testing.B) {
	shape(b, sdktrace.NewTracerProvider(sdktrace.WithSyncer(discard{})), false, false)
}
func BenchmarkBareBatchDiscard(b *testing.B) {
	shape(b, sdktrace.NewTracerProvider(sdktrace.WithBatcher(discard{})), false, false)
}
func BenchmarkFullNoProcessor(b *testing.B) { shape(b, sdktrace.NewTracerProvider(), true, false) }
func BenchmarkFullSyncDiscard(b *testing.B) {
	shape(b, sdktrace.NewTracerProvider(sdktrace.WithSyncer(discard{})), true, false)
}
func BenchmarkFullBatchDiscard(b *testing.B) {
	shape(b, sdktrace.NewTracerProvider(sdktrace.WithBatcher(discard{})), true, false)
}
func BenchmarkFullBatchOTLP(b *testing.B) {
	exp, _ := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(sink(b)+"/v1/traces"))
	shape(b, sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp)), true, false)
}
func BenchmarkFullChildBatchOTLP(b *testing.B) {
	exp, _ := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(sink(b)+"/v1/traces"))
	shape(b, sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp)), true, true)
}
func BenchmarkBareBatchOTLP(b *testing.B) {
	exp, _ := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(sink(b)+"/v1/traces"))
	shape(b, sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp)), false, false)
}
