// Package scenario runs "what happens if" questions about an LLM (or
// classifier and regressor) fleet in virtual time: `modelplane sim run`, `modelplane bench engine`, and tests
// that need a fleet's numbers without a fleet.
//
// It owns:
//   - the Scenario: a fleet of simulated GPUs per version (each with the
//     version's profile.Profile), an arrival process, prompt and output length
//     distributions, routing weights, tenants, a duration and a seed; read
//     from YAML (Parse, documented in docs/simulation.md) or taken from the
//     built-ins (Builtin, Builtins), which are YAML files themselves;
//   - the discrete-event fleet run (Run): one engine.Scheduler per GPU, a router
//     that picks a version by weight and then the replica of that version
//     with the fewest outstanding requests, and an event loop that always
//     advances whichever comes first, the next arrival or the end of some
//     replica's step. The schedulers are the very code the real-time
//     replicas and the built-in LLM runtime run; only the clock differs. A classic version (a classifier
//     or regressor profile) has no scheduler: each request is answered
//     after a latency, with an error or an output, drawn from its profile;
//   - the fleet Report: per-version request counts, TTFT, TPOT and end-to-end
//     percentiles, tokens/s, batch and KV occupancy, KV waste against a
//     contiguous max-length reservation, preemptions; simulated and wall
//     seconds;
//   - rollouts in virtual time (Rollout, RolloutReport): the judge
//     (package judge) evaluates the candidate against the incumbent every
//     interval from the requests that ended in its window, and its verdict
//     moves the split (advance, hold, roll back), stopping before 100
//     percent to wait for an approval no simulation gives; for classic
//     pairs, optionally gated on the drift of sampled outputs (package
//     drift's normalised Wasserstein-1); optionally the same arrivals with
//     the candidate flipped to 100 percent, or the same rollout without the
//     drift gate, for contrast;
//   - a static-batching engine (RunStatic) with the same step-time model, and
//     the comparison of the two at equal median latency (CompareBatching),
//     the baseline of `modelplane bench engine`.
//
// A run is a pure function of its scenario: every random draw comes from
// generators seeded by Scenario.Seed, so two runs of a scenario give the
// same report. The package reads the wall clock only through Options.Now,
// to report how fast the simulation ran, never to decide anything. It does
// no I/O of its own (the caller reads files and prints reports), starts no
// goroutines, and knows nothing of HTTP, NATS, the database or the
// registry.
package scenario
