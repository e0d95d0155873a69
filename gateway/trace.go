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
// A trace shows each as an event on ml_serving.request, named for the step
// and stamped when the step ended (the step began where the one before
// it, or the request, began), rather than as a child span: four spans more
// a request cost the traced gateway a quarter of its throughput (bench
// gateway, docs/operations.md), and a step has nothing a span would add.
// The timestamps are taken only when the request's span records, so an
// untraced or unsampled request pays one branch a step.
const (
	stepAuthn = iota
	stepSchema
	stepRateLimit
	stepRouting
	steps
)

var stepNames = [steps]string{"ml_serving.authn", "ml_serving.schema_validation", "ml_serving.rate_limit_check", "ml_serving.traffic_routing"}

// requestAttrs is how many attributes endTrace sets on a request's span.
const requestAttrs = 7

// tracerOf returns the gateway's tracer: tp's, or a no-op one.
func (g *Gateway) tracerOf(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		return tracing.Off().Tracer("modelplane/gateway")
	}
	return tp.Tracer("modelplane/gateway")
}

// serverKind and the other start options every traced request uses are
// built once: an option is an interface, and building one per request
// allocates.
var serverKind = trace.WithSpanKind(trace.SpanKindServer)

// startTrace starts the request's root span, as a child of the caller's
// traceparent when it sent one, and answers with the trace's traceparent
// so the caller can quote one id, sampled or not.
func (g *Gateway) startTrace(w http.ResponseWriter, c *call, r *http.Request) *http.Request {
	if g.cfg.Tracer == nil && r.Header.Get("traceparent") == "" {
		return r // tracing off and no caller's trace: the request path pays nothing
	}
	ctx, span := g.tracer.Start(tracing.Extract(r.Context(), r.Header), "ml_serving.request", serverKind, trace.WithTimestamp(c.start))
	sc := span.SpanContext()
	if !sc.IsValid() {
		return r // tracing off and no caller's trace: nothing to say
	}
	c.span, c.tracer, c.traceID = span, g.tracer, sc.TraceID().String()
	c.tracing = span.IsRecording()
	w.Header().Set("traceparent", "00-"+c.traceID+"-"+sc.SpanID().String()+"-"+sc.TraceFlags().String())
	return r.WithContext(ctx)
}

// mark records when step i of the request path ended.
func (c *call) mark(i int) {
	if c.tracing {
		c.marks[i] = time.Now()
	}
}

// endTrace ends the root span at end, with the steps as events and what
// the request came to as attributes.
func (c *call) endTrace(end time.Time) {
	if c.span == nil {
		return
	}
	if c.tracing {
		for i, at := range c.marks {
			if at.IsZero() {
				break // the request ended before this step
			}
			c.span.AddEvent(stepNames[i], trace.WithTimestamp(at))
		}
		// The attributes are built in an array of the call's, not in a
		// slice each request allocates, and the flags only when set: the
		// exporter allocates about three times for each attribute.
		a := append(c.attrs[:0], attribute.String("endpoint", c.endpoint), attribute.String("version", c.versionName()),
			attribute.String("replica", c.replica), attribute.Int("http.response.status_code", c.status), attribute.String("request_id", c.id))
		if c.pinned {
			a = append(a, attribute.Bool("pinned", true))
		}
		if c.retried {
			a = append(a, attribute.Bool("retried", true))
		}
		c.span.SetAttributes(a...)
		if c.status >= 500 {
			c.span.SetStatus(codes.Error, http.StatusText(c.status))
		}
		if c.streamed && !c.firstEvent.IsZero() {
			c.span.AddEvent("first_event", trace.WithTimestamp(c.firstEvent), trace.WithAttributes(attribute.Int("tokens", c.tokens)))
		}
	}
	c.span.End(trace.WithTimestamp(end))
}

// child starts a child span of the request's while it records (nil
// otherwise): the call to a replica (ml_serving.model_inference, which
// the replica continues from the traceparent send writes) and the held
// wait of an endpoint scaled to zero.
func (c *call) child(ctx context.Context, name string, kind trace.SpanKind, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	if !c.tracing {
		return ctx, nil
	}
	return c.tracer.Start(ctx, name, trace.WithSpanKind(kind), trace.WithAttributes(attrs...))
}
