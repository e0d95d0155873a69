// Package bench holds the benchmarks `modelplane bench NAME` runs (and
// `make bench` runs all of): each starts what it measures privately
// (PostgreSQL, ClickHouse and NATS as child or in-process servers, the
// gateway as a child pinned to its own core) and prints one result, as
// JSON with --json. A benchmark's file is named after it; bench.go holds
// the configuration, the dispatch and what they share: one quantile
// helper for every figure, the private servers, the in-process gateway.
//
// Timing belongs here, not in `go test`: the numbers depend on the
// machine, so nothing here asserts them; each result says which of its
// targets it met. The package is a client of the domain packages and of
// the assembly in app (the API benchmark serves app's handler); nothing
// imports it but cmd/modelplane.
package bench
