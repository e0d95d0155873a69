package tracing

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/coder/quartz"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// BenchmarkParts is the parts of a traced request's tracing, one at a
// time, as the gateway does them: Start with the sampler's shortcut and
// with the SDK's sampler (without and with a caller's traceparent), the
// traceparent's string, the eight attributes of a predict request, End's
// copy into the queue, the export's encoding per span of a full batch,
// and net/http writing the answer's headers without and with the
// traceparent (which it does twice a request: the answer and the call to
// the replica).
//
//	GOMAXPROCS=1 go test -run X -bench Parts -benchmem ./tracing
func BenchmarkParts(b *testing.B) {
	sampler, _ := samplerFrom(func(string) string { return "" })
	sdk := newRecorder(discard{}, sdktrace.ParentBased(sdktrace.TraceIDRatioBased(1)), resource.Empty(), batchConfig{delay: time.Hour, queue: 2048, batch: 512, timeout: time.Second}, quartz.NewMock(b))
	defer sdk.Shutdown(context.Background())
	r := newRecorder(discard{}, sampler, resource.Empty(), batchConfig{delay: time.Hour, queue: 2048, batch: 512, timeout: time.Second}, quartz.NewMock(b))
	defer r.Shutdown(context.Background())
	parent := trace.NewSpanContext(trace.SpanContextConfig{TraceID: newTraceID(), SpanID: newSpanID(), TraceFlags: trace.FlagsSampled, Remote: true})
	var s RequestSpan
	now := time.Now()
	r.Start(&s, trace.SpanContext{}, "ml_serving.request", now)
	predictAttributes(&s)
	s.End = now.Add(time.Millisecond)
	b.Run("start", func(b *testing.B) {
		for b.Loop() {
			r.Start(&s, trace.SpanContext{}, "ml_serving.request", now)
		}
	})
	b.Run("start_sdk", func(b *testing.B) {
		for b.Loop() {
			sdk.Start(&s, trace.SpanContext{}, "ml_serving.request", now)
		}
	})
	b.Run("start_parent_sdk", func(b *testing.B) {
		for b.Loop() {
			sdk.Start(&s, parent, "ml_serving.request", now)
		}
	})
	b.Run("start_parent", func(b *testing.B) {
		for b.Loop() {
			r.Start(&s, parent, "ml_serving.request", now)
		}
	})
	b.Run("traceparent", func(b *testing.B) {
		for b.Loop() {
			_ = Traceparent(s.Context)
		}
	})
	b.Run("attributes", func(b *testing.B) {
		for b.Loop() {
			s.n, s.used = 0, 0
			predictAttributes(&s)
		}
	})
	b.Run("end", func(b *testing.B) {
		for b.Loop() {
			r.End(&s)
			if r.queued() == r.cfg.queue {
				r.mu.Lock()
				r.cur = r.cur[:0]
				r.mu.Unlock()
			}
		}
	})
	b.Run("encode", func(b *testing.B) {
		spans := make([]RequestSpan, 512)
		for i := range spans {
			spans[i] = s
		}
		var e encoder
		for b.Loop() {
			e.encodeRequests(resource.Empty(), instrumentation.Scope{Name: GatewayScope}, spans)
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*512), "ns/span")
	})
	h := http.Header{"Content-Type": {"application/json"}, "Content-Length": {"90"}, "X-Request-Id": {"0123456789abcdef"}, "X-Model-Version": {"stable"}}
	b.Run("header_without", func(b *testing.B) {
		for b.Loop() {
			_ = h.Write(io.Discard)
		}
	})
	h2 := h.Clone()
	h2["Traceparent"] = []string{Traceparent(s.Context)}
	b.Run("header_with", func(b *testing.B) {
		for b.Loop() {
			_ = h2.Write(io.Discard)
		}
	})
}

// predictAttributes sets what the gateway's endTrace sets on a predict
// request that reached its replica.
func predictAttributes(s *RequestSpan) {
	s.SetAttributes(attribute.String("endpoint", "bench"), attribute.String("version", "stable"),
		attribute.String("replica", "stable-0"), attribute.Int("http.response.status_code", 200))
	s.SetAttributes(attribute.Key("ml_serving.authn_us").Int64(3))
	s.SetAttributes(attribute.Key("ml_serving.schema_validation_us").Int64(3))
	s.SetAttributes(attribute.Key("ml_serving.traffic_routing_us").Int64(3))
	s.SetAttributes(attribute.Int64("ml_serving.model_inference_us", 40))
}

// discard is an exporter that drops what it is given.
type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }
