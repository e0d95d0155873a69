// Package arch holds no code. Its test, TestImportDirections, enforces the
// import directions of DESIGN.md section 3 (docs/architecture.md once the
// design moves into the repository) on the real package graph, so a
// wrong-way import fails `make lint` and `make test` instead of waiting for
// a reviewer:
//
//   - pure packages (sim/..., judge, graph, placement, autoscale, drift/stat,
//     money) reach no database, ClickHouse or NATS client, nor package db;
//   - the leaf contracts (busapi, drift/stat, money, sim/profile)
//     import only the standard library;
//   - gateway, agent and runtime never reach package db;
//   - web imports only its own packages, static and the view-neutral
//     packages listed in the test (handlers fill typed view structs);
//   - handlers does not import db: it calls domain services;
//   - domain packages import no chi, huma, templ, handlers or web;
//   - the simulator's engine (sim, sim/replica, sim/scenario) is used only
//     by the node agent, which runs simulated replicas, and by commands and
//     benchmarks: domain packages may import the pure leaves (sim/profile,
//     drift/stat, money) but not the engine;
//   - sim/... does not import drift; the fleet's packages (fleet, quota,
//     autoscaler, trust) do not import chargeback; rollout and endpoint do
//     not import any of them; replica, the stored form of a replica's
//     reports, does no I/O.
//
// Rules name packages by pattern, so a rule for a package that does not
// exist yet (autoscale, runtime) applies as soon as it appears.
package arch
