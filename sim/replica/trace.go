package replica

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/trace"

	"modelplane/tracing"
)

// A simulated replica traces as the built-in runtime does (docs/operations.md,
// "Tracing"), so that a trace through the gateway reaches a simulated GPU
// replica too: ml_serving.runtime, a child of the caller's traceparent, and
// under it what the simulation modelled. A prediction's wait is
// ml_serving.gpu_inference; a generation's are tracing.Generation's: the
// queue wait until the step that first admitted it (StepResult.Admitted),
// prefill and decode.

// traceOf returns the generation's trace when ctx's span records, nil
// otherwise: the step loop records its tokens' times there.
func traceOf(ctx context.Context) *tracing.Generation {
	if !trace.SpanFromContext(ctx).IsRecording() {
		return nil
	}
	return &tracing.Generation{}
}

// genSpans writes generation g's spans under ctx's span
// (tracing.Generation.Record): finish when it ended well, else abort or
// error, as the built-in runtime counts them. Only once the handler has
// seen the loop close g.tokens.
func genSpans(ctx context.Context, g *generation, prompt int, finish string) {
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
	t.PromptTokens, t.Finish, t.Arrival = prompt, finish, g.arrived
	t.Record(ctx)
}
