// Package versioncheck runs a registered version through the built-in
// runtime before it may take traffic (seed §3: registered → validated or
// invalid). The Validator, a leader-only background loop of the control
// plane, takes the versions the registry queued, lays their files out from
// the artifact store with the serving configuration the replicas get,
// and runs `modelplane runtime validate` on them as a child process with
// a time and a memory limit: a model that crashes, hangs or eats memory
// kills the child, never the control plane. The answers, the latency and
// the verdict go to model_version_validations and the version's status,
// in one transaction.
//
// Check is the child's side: it loads the model the way a replica does and
// answers the inputs. This package must not serve traffic or place
// replicas; it is not package field, which reports bad request fields.
package versioncheck
