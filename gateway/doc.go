// Package gateway is the inference data plane: it authenticates, authorises
// and routes every prediction and chat-completion request to a ready replica
// and relays the answer, streaming server-sent events as they come.
//
// It works from three KV buckets the control plane writes (busapi):
// mp_routes (the routing table), mp_keys (API key digests) and mp_identity
// (the OIDC issuer's signing keys and the users' memberships, for bearer
// tokens verified locally). It watches them, serves from an in-memory snapshot swapped atomically (the request
// path takes no lock), and keeps the last good snapshot on disk so that a
// gateway started while NATS or the control plane is down still serves. It
// never calls the control plane, a database or the replicas' management API
// on the request path, and it must not import db (nor auth, which reads the
// database): everything it knows arrives over NATS.
//
// Decisions worth knowing:
//   - Each (re)watch of a bucket replaces the whole table with the bucket's
//     content, so an endpoint or key deleted while the gateway was away is
//     gone; between resyncs a routing entry older than the one held is a
//     replay and ignored, and a deletion forgets the generation (the control
//     plane restarts generations for an endpoint created again).
//   - Another team's endpoint, and an LLM endpoint called on /predict (or the
//     reverse), answer 404 exactly like an unknown one, unless the routing
//     entry grants the caller's team access (grant.go): that team's own
//     rate limit, daily quota (a counter in mp_grant_quota, the one bucket
//     the gateway writes, reserved in chunks across gateways) and sampling
//     flag then apply, and its requests are a statistics series of their
//     own naming it, for chargeback.
//   - Inputs are checked against the endpoint's JSON Schema (one instance of
//     a predict body, the whole body of a chat call), compiled once when the
//     routing entry arrives or its schema changes, never on the request path;
//     external $refs are refused. A schema that does not compile is logged
//     once, on the endpoint's first request, and the endpoint is served
//     without validation rather than refusing every call.
//   - Rate limits are token buckets per API key, then per endpoint, created
//     on first use and evicted once full again (a full bucket is a new one).
//     An endpoint's own rate limit (its routing entry) replaces Config's.
//     A refused request gets 429 with Retry-After from the bucket.
//   - Version choice: a pin, then the A/B arm of X-User-Id (a stable FNV
//     hash of experiment name and user id), then the weighted split.
//   - Shadow copies run on a bounded set of goroutines detached from the
//     request; when all are busy a copy is dropped, never queued, so the
//     caller never waits on a shadow. Their statistics are their version's.
//   - Passive ejection skips a replica after consecutive failures for a
//     cool-down, but never the last usable replica of a version.
//   - Load shedding: a replica takes at most MaxOutstandingPerReplica
//     requests from this gateway at once; when every replica of the chosen
//     version has that many, the request gets 429 instead of a queue, so
//     that replicas are never driven into preemption. The bound is per
//     gateway, not across gateways.
//   - A request is retried on another replica only when the first could not
//     be connected to, or closed or reset the connection before any byte of
//     an answer (a replica stopping as its endpoint scales down): no byte
//     reached the caller, and the call carries an idempotency key. Any
//     later failure is the caller's to retry.
//   - Calls whose answer is not a stream go to plain-HTTP replicas on the
//     gateway's own HTTP/1.1 client (unary.go): one write a request, the
//     answer read on the handler's goroutine, kept-alive connections per
//     replica address with net/http's resend of a call whose kept
//     connection the replica had closed. Streams, TLS to replicas and a
//     Transport given in Config use net/http's Transport.
//   - A version whose routing entry says protocol "v2" (Triton) is called on
//     /v2/models/{m}/infer: package kserve turns the instances into one FP32
//     tensor (or, for a model with no feature_names, one tensor per named
//     input) and the answer back into predictions (v2.go). An instance it
//     cannot carry is the caller's 400, never sent.
//   - A request of an endpoint scaled to zero that finds no replica is held
//     in a bounded queue per endpoint while its wake starts one, and proxied
//     when a replica reaches the routing table within the endpoint's
//     cold-start budget; held requests wait on routing updates, never on a
//     polling timer. Past the budget, or with the queue full, 202 with a
//     Retry-After from the version's measured cold start (hold.go).
//   - A graph endpoint (route task graph) runs here (graph.go): its version's
//     definition arrives in the routing entry and is parsed once; each step
//     is served in memory by the same handle as a public request, as the
//     graph's team, so it is authorised, limited, counted and traced as any
//     call (a span per step). A hard step's failure is 502 problem+json
//     naming the node; a soft step left out is marked in the answer.
//   - A streaming client that takes longer than the stall timeout to accept
//     an event is cut; cancelling the upstream request makes the replica
//     cancel the generation and free its KV pages.
package gateway
