// Package catalog is the runtime catalogue of the process driver (DESIGN.md
// section 15): for each runtime the agent can launch as a child process, the
// command line, how the model directory, port and devices are passed, the
// health, readiness and metrics paths, and the adapter that turns the
// runtime's Prometheus metrics into what a heartbeat carries.
//
// It owns the mapping from a registry runtime (a version's
// metadata.runtime) to a catalogue entry: the registry's xgboost, lightgbm
// and onnxruntime runtimes on a CPU node, and its tokenizer runtime on any
// node, are served by the built-in runtime (`modelplane runtime`).
//
// It must stay free of I/O beyond parsing a metrics body it is handed: the
// driver launches and probes, the catalogue only describes. It imports
// nothing of modelplane's, so the driver, the control plane's validation and
// documentation can all read it.
package catalog
