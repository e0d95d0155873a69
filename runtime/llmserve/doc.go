// Package llmserve is the built-in runtime's LLM engine (DESIGN §19): it
// serves a llama-architecture GGUF model on the CPU with the platform's own
// continuous-batching scheduler and paged KV-cache manager (package engine,
// which the simulator runs too) holding real K/V: each step
// the scheduler plans which sequences run and which pages they use, the
// engine runs the model's forward pass over those pages, samples, and
// commits the tokens back. Admission with growth reservation, per-tenant
// caps keyed by the team the gateway vouches for (proto.TeamHeader, never
// the body's user), preemption with re-prefill, automatic prefix caching
// (every prompt's full pages named by a hash chain of their tokens, kept
// cached after their request ends and evicted least recently released
// first, before anything is preempted), and cancel freeing pages at once
// all come from the scheduler. The engine bounds its waiting queue
// (ErrQueueFull, a 429) and takes its sizes from the version's
// serving.llm settings (Settings).
//
// It speaks the OpenAI replica contract of sim/replica (chat and text
// completions, SSE streaming, usage) plus health probes and Prometheus
// metrics under vLLM's names, so the vLLM adapter reads it. It does not
// read model files itself (package llm does) and never imports the
// database or the agent.
package llmserve
