package llmserve

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"modelplane/tracing"
)

// genTrace collects, from a traced generation's events, what its spans
// are made of: when the engine took the request in, first ran it and had
// each token, on the engine's clock. The zero value (not traced) records
// nothing.
type genTrace struct {
	on                      bool
	arrival, admitted, last time.Duration
	tokens                  int
	at                      []time.Duration // the first token's, then the first decode steps'
	reason                  string
}

// event records ev: a token, or the end.
func (t *genTrace) event(ev Event) {
	if !t.on {
		return
	}
	if ev.Done {
		t.reason = ev.Reason
		return
	}
	if t.tokens == 0 {
		t.arrival, t.admitted = ev.Arrival, ev.Admitted
	}
	if len(t.at) <= tracing.MaxDecodeEvents {
		t.at = append(t.at, ev.At)
	}
	t.tokens++
	t.last = ev.At
}

// spans writes the generation's spans under the runtime's span in ctx, as
// the seed asks of a runtime (queue wait, batch execution) in an LLM's
// terms: ml_serving.batch_queue_wait until a step first ran the request,
// ml_serving.prefill until its first token, ml_serving.decode until its
// last, with one event a decode step (bounded); and the request's token
// counts and finish reason on the runtime's span. A generation that made
// no token (refused, or its caller gone while it waited) has only the
// counts.
func (t *genTrace) spans(ctx context.Context, eng *Engine, promptTokens int) {
	span := trace.SpanFromContext(ctx)
	if !t.on || !span.IsRecording() {
		return
	}
	span.SetAttributes(attribute.Int("prompt_tokens", promptTokens), attribute.Int("completion_tokens", t.tokens))
	if t.reason != "" {
		span.SetAttributes(attribute.String("finish_reason", t.reason))
	}
	if t.tokens == 0 {
		return
	}
	tr := span.TracerProvider().Tracer(tracing.RuntimeScope)
	child := func(name string, from, to time.Duration, attrs ...attribute.KeyValue) trace.Span {
		_, s := tr.Start(ctx, name, trace.WithTimestamp(eng.Wall(from)), trace.WithAttributes(attrs...))
		return s
	}
	end := func(s trace.Span, at time.Duration) { s.End(trace.WithTimestamp(eng.Wall(at))) }
	end(child("ml_serving.batch_queue_wait", t.arrival, t.admitted), t.admitted)
	end(child("ml_serving.prefill", t.admitted, t.at[0], attribute.Int("prompt_tokens", promptTokens)), t.at[0])
	if t.tokens < 2 {
		return
	}
	d := child("ml_serving.decode", t.at[0], t.last, attribute.Int("tokens", t.tokens-1))
	for i, at := range t.at[1:] {
		d.AddEvent("decode_step", trace.WithTimestamp(eng.Wall(at)), trace.WithAttributes(attribute.Int("index", i+1)))
	}
	if dropped := t.tokens - len(t.at); dropped > 0 {
		d.SetAttributes(attribute.Int("dropped_events", dropped))
	}
	end(d, t.last)
}
