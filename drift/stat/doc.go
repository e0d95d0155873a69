// Package stat owns the pure statistics of drift detection: PSI over
// reference-decile bins, KL divergence of class shares, Wasserstein-1 (exact
// and from sampled quantile functions), ClickHouse's quantile definitions,
// the thresholds that flag each score, the least sample count before any
// score is judged, and the metric names scores are recorded under.
//
// It imports only the standard library and does no I/O: no clock, no
// database, no ClickHouse, no NATS. Package drift computes the same numbers
// from ClickHouse aggregates and stores them; the virtual-time simulator
// (sim/scenario) computes them from its own samples. Both use this package
// so that the simulator does not pull drift's database clients in, and so
// that the two cannot disagree on a definition. The import-direction test
// in internal/arch keeps it that way.
package stat
