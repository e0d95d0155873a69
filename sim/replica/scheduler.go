package replica

import (
	"time"

	"modelplane/engine"
)

// SchedulerEngine adapts engine.Scheduler, the continuous-batching scheduler
// with the paged KV cache, to Engine. It keeps the scheduler's model-time
// clock: each Step starts when the previous one ended, or at the current
// clock when the scheduler was idle.
type SchedulerEngine struct {
	s   *engine.Scheduler
	now time.Duration
}

// NewSchedulerEngine returns an Engine that runs s.
func NewSchedulerEngine(s *engine.Scheduler) *SchedulerEngine { return &SchedulerEngine{s: s} }

// Submit queues the sequence at the current model time with its exact
// output length.
func (e *SchedulerEngine) Submit(seq Sequence) error {
	return e.s.Submit(engine.Request{ID: seq.ID, Tenant: seq.Tenant, Arrival: e.now,
		PromptTokens: seq.PromptTokens, MaxTokens: seq.OutputTokens, OutputTokens: seq.OutputTokens})
}

// Step runs one scheduler step and advances the model clock by its duration.
func (e *SchedulerEngine) Step() StepResult {
	r := e.s.Step(e.now)
	if r.Duration > 0 {
		e.now = r.End()
	}
	out := StepResult{Duration: r.Duration, Tokens: make([]Token, len(r.Events)), Admitted: r.FirstAdmitted}
	for i, ev := range r.Events {
		out.Tokens[i] = Token{ID: ev.ID, Last: ev.Last}
	}
	return out
}

// Cancel drops the sequence and frees its pages at once.
func (e *SchedulerEngine) Cancel(id string) { e.s.Cancel(id) }

// Stats reports the scheduler's queue and KV cache.
func (e *SchedulerEngine) Stats() EngineStats {
	st := e.s.Stats(e.now)
	return EngineStats{Waiting: st.Waiting, Running: st.Running, KVPagesUsed: st.KVPagesUsed, KVPagesTotal: st.KVPagesTotal}
}
