// Package controlplane builds the control plane: every domain service
// exactly once, from the stores and the configuration, plus the list of
// background services (the reconciler, the outbox relay, the ingest
// consumers, the rollout, drift and budget checks, the sealer, the
// identity publisher, the sweeps), leader-only ones each under its own
// db.Lease.
//
// `modelplane dev`, `modelplane server`, the demo loader, end-to-end tests
// and benchmarks all call New; the HTTP layer (handlers) receives the
// services it builds and never a pool. The package holds no business rules
// and imports no HTTP package: it is assembly only.
package controlplane
