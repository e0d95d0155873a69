// Package sim is the engine of the simulated fleet: the model of one GPU
// serving an LLM, used in real time by the replicas (package sim/replica)
// and in virtual time by `modelplane sim` scenarios and tests.
//
// It owns (the "sim" profile it runs on, a model version's step-time,
// KV-cache, latency, score and class figures, is package sim/profile):
//   - the paged KV-cache manager (KV): 16-token pages, a sequence holding
//     ceil(tokens/16) of them, full prompt pages named by a hash chain and
//     shared by reference count, and, with prefix caching, kept cached
//     after their last holder ends and evicted least recently released
//     first when pages are needed;
//   - the continuous-batching scheduler (Scheduler): admission against free
//     pages after reserving the running sequences' growth, a batch cap,
//     per-tenant caps on batch slots and pages that rotate a tenant at its
//     cap to the back instead of evicting a neighbour, priority preemption
//     with re-prefill, chunked prefill, every token streamed;
//   - the step-time model: a step lasts decode_base_ms + decode_ms_per_seq ×
//     decoding sequences + prefill_ms_per_token × prompt tokens computed, so
//     TTFT and TPOT come out of the schedule, never out of a random number;
//   - a small virtual-time driver (RunVirtual) and its Report.
//
// It must not read the wall clock, sleep, start goroutines, log, or keep
// package-level mutable state: time is the caller's (Step takes now, a
// Request carries its arrival), so the same code runs in real time and in
// virtual time, and a run is a pure function of its seed and inputs. It
// imports only the standard library and sim/profile, and knows nothing of
// HTTP, NATS, the database or the registry; the registry stores a profile
// as opaque JSON and validates it with sim/profile, never importing this
// package.
//
// A real-time loop, as a replica runs it (t0 the replica's start):
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
package sim
