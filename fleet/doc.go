// Package fleet is the control plane's side of the GPU fleet: it records what
// node agents report (inventory, heartbeats, replica states), turns each
// endpoint's demand into replicas placed by package placement, marks silent
// nodes lost and places their replicas elsewhere, and writes the desired state
// of every node (KV mp_desired) and, through package route, the routing
// table of every endpoint (KV mp_routes) to the outbox in the same
// transaction as the change.
//
// Endpoints with min_replicas 0 are scaled to zero: a gateway's wake request
// (proto.WakeSubject) gives them one replica per routed version for an idle
// grace period after the last request (wake.go). Budgets with block
// enforcement at 100 percent cap what the reconciler wants at min_replicas
// for new replicas (running ones stay).
//
// A replica whose agent reports MoveAfterFailures failures in a row on its
// node (a runtime that crashes on every start, never becomes ready) is
// removed and placed again on another node: that node stays out of the
// version's placement for ExcludeFor (table placement_exclusions), the new
// replica's placement note names the node and the failure, and an endpoint
// with nowhere left says so in its placement error.
//
// What it does not own lives beside it: package quota keeps team quotas
// and counts usage against them (the reconciler caps what it places by a
// quota.Table, limits.go); package autoscaler runs the autoscaling loop
// that sets the counts the reconciler places; package trust decides what
// a heartbeat is believed about (the intake calls it); package replica is
// the stored form of a replica's reports. Endpoint changes wake the
// reconciler (endpoint.Service.OnChange), as heartbeats that change a
// replica and autoscaler decisions do; the tick remains for what no event
// announces (a node's lease running out).
//
// It never talks to an agent or a gateway directly: everything it sends goes
// through the outbox relay, everything it hears comes from heartbeats. Its
// loops are level-triggered: each pass reads the whole demand and the whole
// observed state and converges, so a missed event costs at most one pass.
package fleet
