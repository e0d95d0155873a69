// Package autoscale decides how many replicas an endpoint version should run:
// from the per-replica metrics of its ready replicas (requests/s, in-flight,
// queue depth, batch queue latency, GPU and KV-cache utilisation, tokens/s)
// and its Policy, one Decide call returns the replica count, whether it
// changed, the signal that won and a reason a person can read, with every
// input, so the caller can store the decision and show it.
//
// It is pure: no clock, no I/O, no randomness. The time of an evaluation is
// Input.Now; what an endpoint remembers between evaluations (the
// stabilisation windows, panic mode, the missing-signal counters, the last
// activity) is a State the caller keeps per endpoint and passes back each
// time, so the control-plane leader and the virtual-time fleet run the same
// rules and a test replays an hour of decisions in microseconds.
//
// The rules (DESIGN.md section 17, docs/autoscaling.md): per signal desired
// = ceil(ready × mean / target), the largest wins; inside the tolerance band
// nothing changes; scale-up is immediate (0 s window), scale-down goes to the
// highest desire seen in the last 300 s; a decision moves at most 4× up and
// 0.5× down; min/max clamp last. A desire of 2× the current count or more is
// panic: scale up at once and never down until a full scale-down window has
// passed below that threshold. Replicas still starting count as capacity, not
// as load. A configured signal missing from every ready replica holds
// scale-down at once and freezes the endpoint after three evaluations. At
// zero replicas there is no signal: only a wake (a request waiting) starts
// one; an endpoint with min_replicas 0 goes back to zero after its grace
// period without requests.
//
// PolicyDoc is a Policy as the API shows it and endpoints.autoscale_policy
// stores it (seconds for durations, the endpoint's bounds apart); the
// endpoint package reads and writes it here, so it depends on the policy,
// not on the loop that applies it.
//
// It must not read heartbeats, the database or the clock itself, and it does
// not place replicas: package autoscaler runs it against the database, and
// package fleet turns the count into replicas.
package autoscale
