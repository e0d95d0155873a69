package replica

import "time"

// Engine generates tokens for chat requests in model time. It is a
// step-driven continuous-batching scheduler: engine.Scheduler is adapted to it.
//
// The replica calls every method from one goroutine (its step loop), so an
// Engine need not be safe for concurrent use, and it must not block: the
// replica, not the Engine, turns model time into wall-clock time by sleeping
// each StepResult.Duration.
//
// The contract, which enginetest.Check verifies for any Engine (run it in
// the adapter's own tests):
//
//   - Submit only queues; tokens come from later Steps.
//   - Over a sequence's life Step reports exactly Sequence.OutputTokens tokens
//     for it, in order, each exactly once, the last with Last set, unless the
//     sequence is cancelled. A preempted sequence goes back to waiting and, when
//     readmitted, re-prefills (the cost is in Duration) but reports no token
//     twice.
//   - A sequence's KV pages are free by the time Step returns its Last token,
//     and by the time Cancel returns.
//   - Step returns a zero Duration and no tokens only when it could run no
//     forward pass (nothing waiting that fits, nothing running); the replica
//     then waits for the next Submit or Cancel before stepping again.
type Engine interface {
	// Submit queues a sequence for admission by a later Step. It returns an
	// error only when the sequence can never run, for example when its prompt
	// needs more KV pages than the cache has; the replica answers such a
	// request 400 with the error's text, so the text must not contain the
	// prompt.
	Submit(seq Sequence) error
	// Step admits waiting sequences as far as the caps and free pages allow,
	// runs one fused forward pass (prefill for the newly admitted, decode for
	// the rest) and returns its modelled duration with the token each running
	// sequence generated.
	Step() StepResult
	// Cancel drops the sequence wherever it is, waiting or running, and frees
	// its pages before returning. Unknown and finished ids are ignored. After
	// Cancel no Step reports a token for the id.
	Cancel(id string)
	// Stats is a snapshot of the queue and the KV cache.
	Stats() EngineStats
}

// Sequence is one chat request as the engine sees it: sizes only, never text.
type Sequence struct {
	// ID is unique among the sequences of one replica.
	ID string
	// Tenant is the fairness key for per-tenant batch-slot and page caps; it is
	// the request's "user" field, empty when absent.
	Tenant string
	// PromptTokens is the estimated prompt length, at least 1.
	PromptTokens int
	// OutputTokens is how many tokens the sequence generates before it stops,
	// at least 1. The replica decides it from the request's max_tokens.
	OutputTokens int
}

// StepResult is what one forward pass produced.
type StepResult struct {
	// Duration is the pass's modelled time: prefill cost of the newly
	// admitted (and re-prefilled) tokens plus the decode step for the batch.
	Duration time.Duration
	// Tokens are the tokens generated in this pass, in order per sequence.
	Tokens []Token
	// Admitted are the sequences this pass admitted for the first time: a
	// trace's queue wait ends there. An engine that does not say leaves it
	// empty, and a trace's prefill then holds the queue.
	Admitted []string
}

// Token is one generated token of one sequence.
type Token struct {
	// ID is the sequence's ID.
	ID string
	// Last marks the sequence's final token; the sequence has left the batch
	// and freed its pages.
	Last bool
}

// EngineStats is a snapshot of the engine's occupancy.
type EngineStats struct {
	// Waiting is the number of sequences queued, preempted ones included.
	Waiting int
	// Running is the number of sequences in the batch (the batch size).
	Running int
	// KVPagesUsed and KVPagesTotal describe the paged KV cache.
	KVPagesUsed  int
	KVPagesTotal int
}
