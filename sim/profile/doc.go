// Package profile owns the "sim" profile of a model version: the JSON object
// the registry stores with a version (registry.VersionSpec.Sim) and the
// simulator runs. An LLM profile gives the step-time model (StepTime) and
// the KV-cache figures the simulator's engine.Scheduler runs on; a classifier or regressor profile gives the latency,
// score and class figures a replica's /predict draws from. Parse reads one,
// fills its defaults and names the first bad key (errors wrap ErrInvalid).
//
// It is a pure leaf: it imports only the standard library, neither the
// simulator nor the engine, so the registry can refuse a profile the fleet
// could not run at registration without depending on the simulator (the
// import-direction test in internal/arch allows domain packages this
// package, and not package sim). It must not read the clock, do I/O or keep
// package-level mutable state.
package profile
