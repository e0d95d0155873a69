// Package replica is the real-time serving side of the simulated fleet: one
// HTTP server per replica, started by a node agent on a local port, that
// behaves like a model server of the version it plays.
//
// A Server answers the health probes (/v2/health/live, /v2/health/ready), its
// statistics (/v2/stats, and Server.Stats for the agent heartbeat), and one of
// two inference APIs depending on the version's task:
//
//   - classification and regression: POST /predict. Each output is drawn
//     deterministically from the version's sim profile, seeded by the replica
//     seed and a hash of the instance, so the same instance always gets the
//     same answer and a profile can be made to drift or fail on purpose. The
//     request's latency is drawn the same way and really waited.
//   - llm: POST /v1/chat/completions and POST /v1/completions,
//     OpenAI-compatible, with SSE streaming (stream_options.include_usage
//     adds a last chunk of no choices with the usage) and OpenAI's error
//     shape, a prompt past the context window being context_length_exceeded.
//     Tokens come from an Engine (package engine's continuous-batching
//     scheduler on the profile's step-time model, sim.NewScheduler, adapted)
//     that one goroutine steps in wall-clock time, sleeping each
//     step's modelled duration and handing every generated token to the
//     waiting request.
//
// The distributions (log-normal latency fitted to p50/p99, Beta scores with
// the class given by the score's quantile, normal regression values) are
// documented in dist.go and profile.go.
//
// The package owns no scheduling or KV-cache logic of its own: it declares the
// Engine it consumes and trusts it to account pages. It keeps no global state,
// logs through the injected slog.Logger and never logs payloads. It must not
// import the database, NATS or any handlers package; the agent that starts it
// reports Server.Stats over NATS.
package replica
