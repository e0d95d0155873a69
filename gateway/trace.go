package gateway

import (
	"context"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
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
// traffic routing, both in-memory decisions of a few microseconds: the
// SDK deduplicates a span's attributes with a map at its end, which costs
// a third of the span once there are more than eight. The step's end is
// taken only when the request's span records, so an untraced or unsampled
// request pays one branch a step.
const (
	stepAuthn = iota
	stepSchema
	stepRouting
	steps
)

var stepKeys = [steps]attribute.Key{"ml_serving.authn_us", "ml_serving.schema_validation_us", "ml_serving.traffic_routing_us"}

// requestAttrs is the most attributes endTrace sets on a request's span:
// four about where it went, a step's time each and the replica call's
// (eight: what most requests carry), the two flags, and a stream's first
// event and tokens.
const requestAttrs = 4 + steps + 1 + 2 + 2

// tracerOf returns the gateway's tracer: tp's, or a no-op one.
func (g *Gateway) tracerOf(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		return tracing.Off().Tracer("modelplane/gateway")
	}
	return tp.Tracer("modelplane/gateway")
}

// serverKind is built once: an option is an interface, and building one
// per request allocates.
var serverKind = trace.WithSpanKind(trace.SpanKindServer)

// startTrace starts the request's root span, as a child of the caller's
// traceparent when it sent one, and answers with the trace's traceparent
// so the caller can quote one id, sampled or not. The span is kept in c,
// not in the request's context: what continues the trace (inject, child)
// reads it there, and a request with a new context is a copy.
func (g *Gateway) startTrace(w http.ResponseWriter, c *call, r *http.Request) {
	// Looked up by its canonical key: Header.Get would canonicalise
	// "traceparent" on every request, an allocation.
	if g.cfg.Tracer == nil && len(r.Header["Traceparent"]) == 0 {
		return // tracing off and no caller's trace: the request path pays nothing
	}
	// The span starts when the request did, so that it covers what the
	// latency metrics count. The options' slice is the call's: a variadic
	// call through an interface would allocate one.
	opts := append(c.opts[:0], serverKind, trace.WithTimestamp(c.start))
	_, span := g.tracer.Start(tracing.Extract(r.Context(), r.Header), "ml_serving.request", opts...)
	sc := span.SpanContext()
	if !sc.IsValid() {
		return // tracing off and no caller's trace: nothing to say
	}
	// One string serves the answer's header, the replica's (inject) and,
	// as its trace id digits, the log line and the exemplars.
	c.traceparent = tracing.Traceparent(sc)
	c.span, c.tracer, c.traceID = span, g.tracer, c.traceparent[3:35]
	c.tracing = span.IsRecording()
	w.Header()["Traceparent"] = []string{c.traceparent}
}

// inject passes the request's trace to a replica: the request span's
// traceparent, and the caller's tracestate when it sent one.
func (c *call) inject(h http.Header) {
	if c.span == nil {
		return
	}
	h["Traceparent"] = []string{c.traceparent}
	if ts := c.span.SpanContext().TraceState(); ts.Len() > 0 {
		h.Set("tracestate", ts.String())
	}
}

// mark records when step i of the request path ended.
func (c *call) mark(i int) {
	if c.tracing {
		c.marks[i] = time.Now()
	}
}

// endTrace ends the root span, with what the request came to and
// how long its steps took as attributes, all set at once: the SDK takes
// one call's attributes in one append.
func (c *call) endTrace() {
	if c.span == nil {
		return
	}
	if c.tracing {
		// The attributes are built in an array of the call's, not in a
		// slice each request allocates, and the flags only when set.
		a := append(c.attrs[:0], attribute.String("endpoint", c.endpoint), attribute.String("version", c.versionName()),
			attribute.String("replica", c.replica), attribute.Int("http.response.status_code", c.status))
		if c.pinned {
			a = append(a, attribute.Bool("pinned", true))
		}
		if c.retried {
			a = append(a, attribute.Bool("retried", true))
		}
		from := c.start
		for i, at := range c.marks {
			if at.IsZero() {
				break // the request ended before this step
			}
			a = append(a, stepKeys[i].Int64(at.Sub(from).Microseconds()))
			from = at
		}
		if c.replica != "" {
			a = append(a, attribute.Int64("ml_serving.model_inference_us", c.upstream.Microseconds()))
		}
		if c.streamed && !c.firstEvent.IsZero() {
			a = append(a, attribute.Int64("ml_serving.ttft_us", c.firstEvent.Sub(c.start).Microseconds()), attribute.Int("tokens", c.tokens))
		}
		c.span.SetAttributes(a...)
		if c.status >= 500 {
			c.span.SetStatus(codes.Error, http.StatusText(c.status))
		}
	}
	c.span.End()
}

// child starts a child span of the request's while it records (nil
// otherwise): the held wait of an endpoint scaled to zero, and a graph's
// steps.
func (c *call) child(ctx context.Context, name string, kind trace.SpanKind, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	if !c.tracing {
		return ctx, nil
	}
	return c.tracer.Start(trace.ContextWithSpan(ctx, c.span), name, trace.WithSpanKind(kind), trace.WithAttributes(attrs...))
}
