// Package rollout moves a new version of a model onto an endpoint in steps
// (DESIGN.md section 8): canary (weights 1, 5, 25, 50, 100 percent by
// default), blue-green (one switch once the candidate is up, the old version
// kept for a rollback window in which the candidate is judged against the
// old version's last window before the switch) and shadow (a mirrored share of the traffic,
// never served). Service is what people call: start, look, approve, reject,
// roll back, pause, resume. Controller is the level-triggered reconciler, run
// by one leader, that reads each active rollout from PostgreSQL, reads both
// versions' request statistics, asks package judge, and moves the weights.
//
// All state lives in PostgreSQL: the controller keeps nothing between passes,
// so a control plane killed mid-rollout resumes from the persisted step, an
// approval given is a row it finds again, and a promotion happens once
// because it is a state change made under the rollout's row lock. Every
// state change writes a rollout event, an audit record and an mp.events
// message (through the outbox) in its own transaction; a weight change
// writes the endpoint's routing entry in that same transaction
// (route.Write, that endpoint only), so a rollback reaches the gateways one
// outbox relay hop after it commits rather than at the fleet reconciler's
// next pass.
//
// The drift gate: a DriftMeasurer (drift.Gate in production) compares the
// candidate's sampled outputs with the incumbent's over each evaluation
// window; the judge rolls back past the threshold. It is on by default for
// classification and regression models on endpoints that sample
// predictions.
//
// The package does not place replicas (package fleet does, for every version
// in routing_rules, weight 0 included) and does not judge (package judge is
// pure and decides from the numbers given).
package rollout
