package scratch

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

var stepKeys = []attribute.Key{"ml_serving.authn_ns", "ml_serving.schema_validation_ns", "ml_serving.rate_limit_check_ns", "ml_serving.traffic_routing_ns"}
var names = []string{"ml_serving.authn", "ml_serving.schema_validation", "ml_serving.rate_limit_check", "ml_serving.traffic_routing"}

func variant(b *testing.B, v int) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(discard{}))
	tr := tp.Tracer("x")
	ctx := context.Background()
	kind := trace.WithSpanKind(trace.SpanKindServer)
	b.ReportAllocs()
	c0 := cpu()
	var attrs [12]attribute.KeyValue
	for b.Loop() {
		start := time.Now()
		_, s := tr.Start(ctx, "ml_serving.request", kind, trace.WithTimestamp(start))
		switch v {
		case 1:
			for _, n := range names {
				s.AddEvent(n, trace.WithTimestamp(start))
			}
			s.SetAttributes(attribute.String("endpoint", "bench"), attribute.String("version", "stable"), attribute.String("replica", "stable-0"), attribute.Int("http.response.status_code", 200), attribute.String("request_id", "0123456789abcdef0123"))
		case 2:
			a := append(attrs[:0], attribute.String("endpoint", "bench"), attribute.String("version", "stable"), attribute.String("replica", "stable-0"), attribute.Int("http.response.status_code", 200), attribute.String("request_id", "0123456789abcdef0123"))
			for i, k := range stepKeys {
				a = append(a, k.Int64(int64(i*1000)))
			}
			s.SetAttributes(a...)
		case 3:
			for _, n := range names {
				s.AddEvent(n)
			}
			s.SetAttributes(attribute.String("endpoint", "bench"), attribute.String("version", "stable"), attribute.String("replica", "stable-0"), attribute.Int("http.response.status_code", 200), attribute.String("request_id", "0123456789abcdef0123"))
		case 4:
			a := append(attrs[:0], attribute.String("endpoint", "bench"), attribute.String("version", "stable"), attribute.String("replica", "stable-0"), attribute.Int("http.response.status_code", 200), attribute.String("request_id", "0123456789abcdef0123"))
			s.SetAttributes(a...)
		}
		s.End(trace.WithTimestamp(start))
	}
	_ = tp.Shutdown(context.Background())
	b.StopTimer()
	b.ReportMetric(float64(cpu()-c0)/float64(b.N), "cpu-ns/op")
}

func BenchmarkV0Bare(b *testing.B)          { variant(b, 0) }
func BenchmarkV1EventsTS(b *testing.B)      { variant(b, 1) }
func BenchmarkV2StepAttrs(b *testing.B)     { variant(b, 2) }
func BenchmarkV3EventsNow(b *testing.B)     { variant(b, 3) }
func BenchmarkV4AttrsNoSteps(b *testing.B)  { variant(b, 4) }
