// Package sim is the simulated fleet's model of one GPU serving an LLM: the
// engine's scheduler (package engine) run on a sim profile's cost model,
// in real time by the replicas (package sim/replica) and in virtual time by
// `modelplane sim` scenarios (sim/scenario) and tests.
//
// It owns (the "sim" profile it runs on, a model version's step-time,
// KV-cache, latency, score and class figures, is package sim/profile):
//   - the wiring of a profile into the engine (NewScheduler, EngineConfig):
//     the KV cache's size from the GPU memory figures, the batch and tenant
//     caps, the completion length distribution, and the step-time model
//     (profile.Profile.StepTime): a step lasts decode_base_ms +
//     decode_ms_per_seq × decoding sequences + prefill_ms_per_token ×
//     prompt tokens computed, so TTFT and TPOT come out of the schedule,
//     never out of a random number;
//   - a small virtual-time driver (RunVirtual) and its Report;
//   - the distributions the replicas draw from (LogNormal, Beta).
//
// The scheduler, the paged KV-cache manager and the prefix cache are not
// simulated: they are package engine, the same code the built-in runtime
// serves real tokens with. This package must not grow scheduling rules of
// its own.
//
// It must not read the wall clock, sleep, start goroutines, log, or keep
// package-level mutable state: time is the caller's, so the same code runs
// in real time and in virtual time, and a run is a pure function of its
// seed and inputs. It imports only the standard library, package engine
// and sim/profile, and knows nothing of HTTP, NATS, the database or the
// registry; the registry stores a profile as opaque JSON and validates it
// with sim/profile, never importing this package.
package sim
