package replica

import (
	"context"
	"errors"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"modelplane/tracing"
)

// A simulated replica traces as the built-in runtime does (docs/operations.md,
// "Tracing"), so that a trace through the gateway reaches a simulated GPU
// replica too: ml_serving.runtime, a child of the caller's traceparent, and
// under it what the simulation modelled. A prediction's wait is
// ml_serving.gpu_inference; a generation's ml_serving.prefill (until its
// first token: the engine's queue is inside it, as the engine does not say
// when it admitted a sequence) and ml_serving.decode (until its last, one
// decode_step event a token for the first tracing.MaxDecodeEvents).

// startSpan starts the request's span at start, continuing the caller's
// trace.
func (s *Server) startSpan(r *http.Request, start time.Time) (context.Context, trace.Span) {
	return s.tracer.Start(tracing.Extract(r.Context(), r.Header), "ml_serving.runtime",
		trace.WithSpanKind(trace.SpanKindServer), trace.WithTimestamp(start))
}

// endSpan ends the request's span with its answer's status.
func (s *Server) endSpan(span trace.Span, status int) {
	if span.IsRecording() {
		span.SetAttributes(attribute.String("model", s.cfg.Endpoint), attribute.String("version", s.cfg.Version),
			attribute.Bool("simulated", true), attribute.Int("http.response.status_code", status))
		if status >= 500 {
			span.SetStatus(codes.Error, http.StatusText(status))
		}
	}
	span.End(trace.WithTimestamp(s.clock.Now()))
}

// child starts a child span of ctx's span at start.
func (s *Server) child(ctx context.Context, name string, start time.Time, attrs ...attribute.KeyValue) trace.Span {
	_, c := s.tracer.Start(ctx, name, trace.WithTimestamp(start), trace.WithAttributes(attrs...))
	return c
}

// genTrace is when a traced generation's tokens came, written by the step
// loop and read by the handler once the loop has closed the tokens.
type genTrace struct {
	at     []time.Time // the first token's, then the first decode steps'
	tokens int
	last   time.Time
}

// traceOf returns a genTrace when ctx's span records, nil otherwise.
func traceOf(ctx context.Context) *genTrace {
	if !trace.SpanFromContext(ctx).IsRecording() {
		return nil
	}
	return &genTrace{}
}

// token records a token made at now; nothing when t is nil.
func (t *genTrace) token(now time.Time) {
	if t == nil {
		return
	}
	if len(t.at) <= tracing.MaxDecodeEvents {
		t.at = append(t.at, now)
	}
	t.tokens++
	t.last = now
}

// genSpans writes generation g's spans under ctx's span: its token counts
// and finish reason (finish when it ended well, else abort or error, as
// the built-in runtime counts them), and prefill and decode when it made
// tokens. Only once the handler has seen the loop close g.tokens.
func (s *Server) genSpans(ctx context.Context, g *generation, prompt int, finish string) {
	t := g.trace
	if t == nil {
		return
	}
	switch {
	case errors.Is(g.err, errCancelled), errors.Is(g.err, errStalled), errors.Is(g.err, errShutdown):
		finish = "abort"
	case g.err != nil:
		finish = "error"
	}
	trace.SpanFromContext(ctx).SetAttributes(attribute.Int("prompt_tokens", prompt),
		attribute.Int("completion_tokens", t.tokens), attribute.String("finish_reason", finish))
	if t.tokens == 0 {
		return
	}
	s.child(ctx, "ml_serving.prefill", g.arrived, attribute.Int("prompt_tokens", prompt)).
		End(trace.WithTimestamp(t.at[0]))
	if t.tokens < 2 {
		return
	}
	d := s.child(ctx, "ml_serving.decode", t.at[0], attribute.Int("tokens", t.tokens-1))
	for i, at := range t.at[1:] {
		d.AddEvent("decode_step", trace.WithTimestamp(at), trace.WithAttributes(attribute.Int("index", i+1)))
	}
	if dropped := t.tokens - len(t.at); dropped > 0 {
		d.SetAttributes(attribute.Int("dropped_events", dropped))
	}
	d.End(trace.WithTimestamp(t.last))
}
