// Package route owns the routing entry of an endpoint: the value of its key
// in KV mp_routes (proto.Route), which gateways serve from. It builds the
// entry from the endpoint's routing rules (versions, weights, shadow
// percentages), its versions' ready replica addresses, its A/B experiment,
// its gateway settings, the teams granted call access with their limits
// (package grant), the budget that blocks it and, for an endpoint
// scaled to zero, its cold-start budget and its versions' measured cold
// starts (coldstart.go), and writes it to the
// outbox, inside the caller's transaction, only when its hash changed
// (table route_entries keeps each entry's generation and hash).
//
// Two callers write entries, and no one else: the fleet reconciler, for
// every endpoint in each pass (WriteAll), and rollouts, for the one endpoint
// whose weights they changed (Write), so that a rollback reaches the
// gateways one outbox relay hop after it commits.
//
// Writers serialise per endpoint on the endpoint's row (Lock): a transaction
// that changes an endpoint's routing input locks it before the change and
// holds it to commit, and every write locks it before it reads that input.
// So a pass never writes an entry from rules a concurrent rollout has
// replaced, and generations never fork. Changes to other endpoints, and
// heartbeats, never wait for it.
//
// It does not place replicas or decide weights (packages fleet and rollout
// do), and it never talks to NATS: the outbox relay publishes what it writes.
package route
