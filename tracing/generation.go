package tracing

import (
	"context"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// StartReplica starts a replica's span for request r at start,
// ml_serving.runtime, continuing the caller's trace (the gateway's
// traceparent).
func StartReplica(tr trace.Tracer, r *http.Request, start time.Time) (context.Context, trace.Span) {
	return tr.Start(Extract(r.Context(), r.Header), "ml_serving.runtime", trace.WithSpanKind(trace.SpanKindServer),
		trace.WithTimestamp(start))
}

// EndReplica ends a replica's span at end with the model, version and
// answer's status, and more, an error status from 500 on.
func EndReplica(span trace.Span, end time.Time, model, version string, status int, more ...attribute.KeyValue) {
	if span.IsRecording() {
		span.SetAttributes(attribute.String("model", model), attribute.String("version", version),
			attribute.Int("http.response.status_code", status))
		span.SetAttributes(more...)
		if status >= 500 {
			span.SetStatus(codes.Error, http.StatusText(status))
		}
	}
	span.End(trace.WithTimestamp(end))
}

// MaxDecodeEvents bounds the events of a generation's decode span: one a
// token (its index) for the first tokens after the first, the rest
// counted in its dropped_events attribute.
const MaxDecodeEvents = 64

// Generation is what an LLM replica (the built-in runtime, a simulated
// one) knows of one traced generation, for its spans: the seed's queue
// wait and batch execution in an LLM's terms.
type Generation struct {
	PromptTokens int
	// Finish is the finish reason; "" when there is none to say.
	Finish string
	// Arrival is when the request arrived, Admitted when a step first
	// ran it: zero when the engine does not say, and then the queue wait
	// is inside the prefill span.
	Arrival, Admitted time.Time
	// Tokens counts the tokens made; times holds when the first came and
	// then the first MaxDecodeEvents decode steps', last when the last did.
	Tokens int
	times  []time.Time
	last   time.Time
}

// Token records a token made at at.
func (g *Generation) Token(at time.Time) {
	if len(g.times) <= MaxDecodeEvents {
		g.times = append(g.times, at)
	}
	g.Tokens++
	g.last = at
}

// Record writes g's spans under the replica's span in ctx, when that
// records: the token counts and finish reason on it, and as its children
// ml_serving.batch_queue_wait until a step first ran the request (when
// known), ml_serving.prefill until the first token and ml_serving.decode
// until the last, with one decode_step event a token, bounded. A
// generation that made no token (refused, or its caller gone while it
// waited) has only the counts.
func (g *Generation) Record(ctx context.Context) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(attribute.Int("prompt_tokens", g.PromptTokens), attribute.Int("completion_tokens", g.Tokens))
	if g.Finish != "" {
		span.SetAttributes(attribute.String("finish_reason", g.Finish))
	}
	if g.Tokens == 0 {
		return
	}
	tr := span.TracerProvider().Tracer(RuntimeScope)
	child := func(name string, from time.Time, attrs ...attribute.KeyValue) trace.Span {
		_, s := tr.Start(ctx, name, trace.WithTimestamp(from), trace.WithAttributes(attrs...))
		return s
	}
	prefillFrom := g.Arrival
	if !g.Admitted.IsZero() {
		child("ml_serving.batch_queue_wait", g.Arrival).End(trace.WithTimestamp(g.Admitted))
		prefillFrom = g.Admitted
	}
	child("ml_serving.prefill", prefillFrom, attribute.Int("prompt_tokens", g.PromptTokens)).End(trace.WithTimestamp(g.times[0]))
	if g.Tokens < 2 {
		return
	}
	d := child("ml_serving.decode", g.times[0], attribute.Int("tokens", g.Tokens-1))
	for i, at := range g.times[1:] {
		d.AddEvent("decode_step", trace.WithTimestamp(at), trace.WithAttributes(attribute.Int("index", i+1)))
	}
	if dropped := g.Tokens - len(g.times); dropped > 0 {
		d.SetAttributes(attribute.Int("dropped_events", dropped))
	}
	d.End(trace.WithTimestamp(g.last))
}
