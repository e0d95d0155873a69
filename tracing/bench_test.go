package tracing

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
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// BenchmarkRequestSpan is what a traced gateway request costs in tracing
// alone: a span started with a timestamp, its traceparent, n attributes
// set at once, ended and exported over OTLP/HTTP to a sink that discards
// it, with this package's exporter or the stock one. cpu-ns/op is the process's CPU time (all goroutines: batch
// processor and export included) per span; run it with GOMAXPROCS=1 as
// the bench pins the gateway, and compare within one run.
//
//	GOMAXPROCS=1 go test -run X -bench RequestSpan -benchmem ./tracing
func BenchmarkRequestSpan(b *testing.B) {
	for _, bc := range []struct {
		name  string
		attrs int
		tp    func(b *testing.B, sink string) trace.TracerProvider
	}{
		{"off", 8, func(*testing.B, string) trace.TracerProvider { return Off() }},
		{"sdk_without_processor", 8, func(*testing.B, string) trace.TracerProvider { return sdktrace.NewTracerProvider() }},
		{"ours_8_attributes", 8, ours},
		{"ours_10_attributes", 10, ours},
		{"stock_exporter_8_attributes", 8, func(b *testing.B, sink string) trace.TracerProvider {
			exp, err := otlptracehttp.New(b.Context(), otlptracehttp.WithEndpointURL(sink+"/v1/traces"))
			if err != nil {
				b.Fatal(err)
			}
			return sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp, sdktrace.WithBlocking()))
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.Copy(io.Discard, r.Body) }))
			defer sink.Close()
			tp := bc.tp(b, sink.URL)
			tr := tp.Tracer("modelplane/gateway")
			kind := trace.WithSpanKind(trace.SpanKindServer)
			var opts [2]trace.SpanStartOption
			attrs := make([]attribute.KeyValue, bc.attrs)
			for i := range attrs {
				attrs[i] = attribute.Int64("key_"+string(rune('a'+i)), int64(i))
			}
			b.ReportAllocs()
			cpu0 := cpuTime()
			for b.Loop() {
				o := append(opts[:0], kind, trace.WithTimestamp(time.Now()))
				_, span := tr.Start(context.Background(), "ml_serving.request", o...)
				_ = Traceparent(span.SpanContext())
				span.SetAttributes(attrs...)
				span.End()
			}
			if p, ok := tp.(*sdktrace.TracerProvider); ok {
				_ = p.Shutdown(context.Background()) // the last batches' export counts
			}
			b.StopTimer()
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

// BenchmarkRequestRecorder is BenchmarkRequestSpan's work done as the
// gateway now does it: a RequestSpan started, its traceparent, eight
// attributes, ended into a Recorder and exported by this package's
// exporter to a sink that discards it. Compare its cpu-ns/op with
// BenchmarkRequestSpan's ours_8_attributes in one run:
//
//	GOMAXPROCS=1 go test -run X -bench 'RequestSpan|RequestRecorder' -benchmem ./tracing
func BenchmarkRequestRecorder(b *testing.B) {
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.Copy(io.Discard, r.Body) }))
	defer sink.Close()
	p, err := fromEnv(b.Context(), "bench", func(k string) string { return map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": sink.URL}[k] })
	if err != nil {
		b.Fatal(err)
	}
	attrs := make([]attribute.KeyValue, 8)
	for i := range attrs {
		attrs[i] = attribute.Int64("key_"+string(rune('a'+i)), int64(i))
	}
	b.ReportAllocs()
	cpu0 := cpuTime()
	var s RequestSpan
	for b.Loop() {
		s = RequestSpan{}
		if !p.Requests.Start(&s, trace.SpanContext{}, "ml_serving.request", time.Now()) {
			b.Fatal("not sampled")
		}
		_ = Traceparent(s.Context)
		s.SetAttributes(attrs...)
		s.End = time.Now()
		p.Requests.End(&s)
		if p.Requests.queued() == p.Requests.cfg.queue {
			_ = p.Requests.ForceFlush(b.Context()) // count every span's export, as the blocking batcher above does
		}
	}
	_ = p.Shutdown(context.Background())
	b.StopTimer()
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
	b.ReportMetric(float64(p.Requests.Dropped()), "dropped")
}

// ours is a provider with this package's exporter. Its batch processor
// blocks rather than drops when the loop outruns the export, as the stock
// one's does here, so that every span's export is counted.
func ours(b *testing.B, sink string) trace.TracerProvider {
	exp, err := newHTTPExporter(func(k string) string { return map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": sink}[k] })
	if err != nil {
		b.Fatal(err)
	}
	return sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp, sdktrace.WithBlocking()))
}

// cpuTime is the process's CPU time so far, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkEncode writes a batch of 512 gateway-shaped spans (eight
// attributes each) as an export's body.
func BenchmarkEncode(b *testing.B) {
	tp := sdktrace.NewTracerProvider()
	tr := tp.Tracer("modelplane/gateway")
	attrs := []attribute.KeyValue{attribute.String("endpoint", "fraud-scoring"), attribute.String("version", "v23"),
		attribute.String("replica", "fraud-scoring-v23-0"), attribute.Int("http.response.status_code", 200),
		attribute.Int64("ml_serving.authn_us", 12), attribute.Int64("ml_serving.schema_validation_us", 31),
		attribute.Int64("ml_serving.traffic_routing_us", 3), attribute.Int64("ml_serving.model_inference_us", 412)}
	spans := make([]sdktrace.ReadOnlySpan, 512)
	for i := range spans {
		_, s := tr.Start(context.Background(), "ml_serving.request")
		s.SetAttributes(attrs...)
		s.End()
		spans[i] = s.(sdktrace.ReadOnlySpan)
	}
	var e encoder
	b.ReportAllocs()
	for b.Loop() {
		_ = e.encode(spans)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(spans)), "ns/span")
}

// BenchmarkEncodeRequests writes a batch of 512 request spans as the
// gateway ends them (eight attributes each) as an export's body, as a
// Recorder's export does.
func BenchmarkEncodeRequests(b *testing.B) {
	spans := make([]RequestSpan, 512)
	start := time.Date(2026, 12, 6, 7, 0, 0, 0, time.UTC)
	r := &Recorder{sampler: sdktrace.AlwaysSample()}
	for i := range spans {
		s := &spans[i]
		r.Start(s, trace.SpanContext{}, "ml_serving.request", start)
		s.SetString("endpoint", "fraud-scoring")
		s.SetString("version", "v23")
		s.SetString("replica", "fraud-scoring-v23-0")
		s.SetInt("http.response.status_code", 200)
		s.SetInt("ml_serving.authn_us", 12)
		s.SetInt("ml_serving.schema_validation_us", 31)
		s.SetInt("ml_serving.traffic_routing_us", 3)
		s.SetInt("ml_serving.model_inference_us", 412)
		s.End = start.Add(time.Millisecond)
	}
	res := resource.NewSchemaless(attribute.String("service.name", "modelplane-gateway"))
	scope := instrumentation.Scope{Name: GatewayScope}
	var e encoder
	b.ReportAllocs()
	for b.Loop() {
		_ = e.encodeRequests(res, scope, spans)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(spans)), "ns/span")
}
