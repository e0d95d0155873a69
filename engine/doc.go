// Package engine is the LLM serving engine's scheduling core: what decides,
// step by step, which sequences run on one accelerator and where their K/V
// lives. The built-in runtime (runtime/llmserve) runs it on real K/V; the
// simulator (sim, sim/replica, sim/scenario) runs it with a modelled step
// time, in real or virtual time.
//
// It owns:
//   - the paged KV-cache manager (KV): fixed-size pages (16 tokens by
//     default), a sequence holding ceil(tokens/page) of them, full prompt
//     pages named by a hash chain and shared by reference count, and, with
//     prefix caching, kept cached after their last holder ends and evicted
//     least recently released first when pages are needed;
//   - the continuous-batching scheduler (Scheduler): admission against free
//     pages after reserving the running sequences' growth (Reserve), a batch
//     cap, per-tenant caps on batch slots and pages that rotate a tenant at
//     its cap to the back instead of evicting a neighbour, priority
//     preemption with re-prefill, chunked prefill, every token streamed;
//     Plan and Commit around a forward pass the caller runs, or Step with
//     the caller's cost model (StepTimer);
//   - the scheduler's statistics (Stats, Percentiles) for heartbeats and
//     metrics.
//
// It must not read the wall clock, sleep, start goroutines, log, or keep
// package-level mutable state: time is the caller's (Step and Plan take
// now, a Request carries its arrival), so the same code runs in real time
// and in virtual time and a run is a pure function of its seed and inputs.
// It holds no step-time model and no sim profile: the cost of a step is
// the caller's (the simulator passes its profile's StepTime; a real engine
// times its own pass). It imports only the standard library and knows
// nothing of models, tokens' text, HTTP, NATS, the database or the
// simulator.
//
// A real-time loop, as a simulated replica runs it (t0 its start):
//
//	for {
//		res := s.Step(time.Since(t0))
//		if res.Duration == 0 {
//			// nothing can run: wait for the next Submit or Cancel
//			continue
//		}
//		sleep until t0 + res.End()
//		hand res.Events to their requests
//	}
//
// A real engine calls Plan, runs the pass over each Work's block table,
// and calls Commit with the pass's duration and sampled tokens.
package engine
