package llmserve

import (
	"context"

	"modelplane/tracing"
)

// genTrace collects, from a traced generation's events, what its spans
// are made of (tracing.Generation), on the wall clock. The zero value
// (not traced) records nothing.
type genTrace struct {
	on bool
	g  tracing.Generation
}

// event records ev, on eng's clock: a token, or the end.
func (t *genTrace) event(eng *Engine, ev Event) {
	if !t.on {
		return
	}
	if ev.Done {
		t.g.Finish = ev.Reason
		return
	}
	if t.g.Tokens == 0 {
		t.g.Arrival, t.g.Admitted = eng.Wall(ev.Arrival), eng.Wall(ev.Admitted)
	}
	t.g.Token(eng.Wall(ev.At))
}

// spans writes the generation's spans under the runtime's span in ctx
// (tracing.Generation.Record).
func (t *genTrace) spans(ctx context.Context, promptTokens int) {
	if !t.on {
		return
	}
	t.g.PromptTokens = promptTokens
	t.g.Record(ctx)
}
