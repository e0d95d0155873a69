// Package autoscaler is the control plane's autoscaling loop: every few
// seconds the fleet's leader reads each routed endpoint's policy and its
// ready replicas' heartbeat metrics, asks package autoscale for the count,
// stores every count that changed with the decision behind it
// (autoscale_counts, autoscale_decisions), raises freezes as events, and
// wakes the fleet's reconciler, which places what the count asks for.
//
// The rules are package autoscale's, which stays pure so the virtual-time
// fleet runs them unchanged; this package is the I/O around them: the
// database, the outbox, the request history, the clock. It must not place
// replicas or write routing entries (package fleet does), and keeps only
// the per-endpoint autoscale.State in memory: a new leader resumes from
// the stored counts.
package autoscaler
