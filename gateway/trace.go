package gateway

import (
	"context"
	"net/http"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"modelplane/tracing"
)

// The steps of the request path (the seed's span list, 001 §15), in order.
// A trace shows how long each took as an attribute of ml_serving.request
// (ml_serving.authn_us, …: microseconds from the end of the step before, or
// the request's start), and the call to the replica as
// ml_serving.model_inference_us, rather than as spans or span events: the
// request's span is the only one a request makes, and its traceparent is
// what the replica continues from. Each span or event more cost the traced
// gateway CPU on every request (bench gateway, docs/operations.md), and a
// step has nothing a span would add. The rate-limit check is counted in
// traffic routing, both in-memory decisions of a few microseconds, so
// that most requests carry eight attributes (tracing.MaxRequestAttrs
// holds the most a request sets: four about where it went, three steps,
// the replica call, two flags, a stream's first event and tokens). The
// step's end is taken only when the request's span records, so an
// untraced or unsampled request pays one branch a step.
const (
	stepAuthn = iota
	stepSchema
	stepRouting
	steps
)

var stepKeys = [steps]string{"ml_serving.authn_us", "ml_serving.schema_validation_us", "ml_serving.traffic_routing_us"}

// tracerOf returns the tracer of the gateway's child spans: tp's, or a
// no-op one.
func tracerOf(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		return tracing.Off().Tracer(tracing.GatewayScope)
	}
	return tp.Tracer(tracing.GatewayScope)
}

// startTrace starts the request's root span, as a child of the caller's
// traceparent when it sent one, and answers with the trace's traceparent
// so the caller can quote one id, sampled or not. The span is the
// tracing package's fixed RequestSpan, kept in c, not the SDK's: a span
// the SDK makes costs a traced request several times what this one does
// (docs/decisions.md). What continues the trace (inject, child) reads it
// there.
func (g *Gateway) startTrace(w http.ResponseWriter, c *call, r *http.Request) {
	// Looked up by its canonical key: Header.Get would canonicalise
	// "traceparent" on every request, an allocation.
	if g.requests == nil && len(r.Header["Traceparent"]) == 0 {
		return // tracing off and no caller's trace: the request path pays nothing
	}
	parent := tracing.Parent(r.Header)
	if g.requests != nil {
		// The span starts when the request did, so that it covers what
		// the latency metrics count.
		s := spans.Get().(*tracing.RequestSpan)
		c.tracing = g.requests.Start(s, parent, "ml_serving.request", c.start)
		c.spanCtx = s.Context
		if c.tracing {
			c.span, c.requests, c.tracer = s, g.requests, g.tracer
		} else {
			spans.Put(s)
		}
	} else {
		c.spanCtx = parent // passed on as it came
	}
	if !c.spanCtx.IsValid() {
		return // a traceparent that does not parse, and tracing off
	}
	// One string serves the answer's header, the replica's (inject) and,
	// as its trace id digits, the log line and the exemplars; one header
	// value serves both headers, as the request id's does.
	c.tp[0] = tracing.Traceparent(c.spanCtx)
	c.traceparent, c.traceID = c.tp[:], c.tp[0][3:35]
	w.Header()["Traceparent"] = c.traceparent
}

// inject passes the request's trace to a replica: the request span's
// traceparent, and the caller's tracestate when it sent one.
func (c *call) inject(h http.Header) {
	if c.traceparent == nil {
		return
	}
	h["Traceparent"] = c.traceparent
	if ts := c.spanCtx.TraceState(); ts.Len() > 0 {
		h.Set("tracestate", ts.String())
	}
}

// mark records when step i of the request path ended, as the time since
// the request's start: time.Since reads the monotonic clock alone, about
// half of what time.Now costs.
func (c *call) mark(i int) {
	if c.tracing {
		c.marks[i], c.marked = time.Since(c.start), i+1
	}
}

// endTrace ends the root span at end (the request's, which the gateway
// has read for its metrics), with what the request came to and how long
// its steps took as attributes.
func (c *call) endTrace(end time.Time) {
	if !c.tracing {
		return
	}
	s := c.span
	s.SetString("endpoint", c.endpoint)
	s.SetString("version", c.versionName())
	s.SetString("replica", c.replica)
	s.SetInt("http.response.status_code", int64(c.status))
	if c.pinned {
		s.SetBool("pinned", true)
	}
	if c.retried {
		s.SetBool("retried", true)
	}
	var from time.Duration
	for i, at := range c.marks[:c.marked] { // the steps the request reached
		s.SetInt(stepKeys[i], (at - from).Microseconds())
		from = at
	}
	if c.replica != "" {
		s.SetInt("ml_serving.model_inference_us", c.upstream.Microseconds())
	}
	if c.streamed && !c.firstEvent.IsZero() {
		s.SetInt("ml_serving.ttft_us", c.firstEvent.Sub(c.start).Microseconds())
		s.SetInt("tokens", int64(c.tokens))
	}
	if c.status >= 500 {
		s.Error = http.StatusText(c.status)
	}
	s.End = end
	c.requests.End(s)
	c.span = nil
	spans.Put(s)
}

// spans are request spans to record into: a span's End copies it.
var spans = sync.Pool{New: func() any { return new(tracing.RequestSpan) }}

// child starts a child span of the request's while it records (nil
// otherwise): the held wait of an endpoint scaled to zero, and a graph's
// steps. It is the SDK's, under the request span's context.
func (c *call) child(ctx context.Context, name string, kind trace.SpanKind, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	if !c.tracing {
		return ctx, nil
	}
	return c.tracer.Start(trace.ContextWithSpanContext(ctx, c.spanCtx), name, trace.WithSpanKind(kind), trace.WithAttributes(attrs...))
}
