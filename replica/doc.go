// Package replica holds what the control plane stores of a running replica
// as its node reports it: the load and cold start of its latest heartbeat
// (Metrics, replicas.metrics) and the process its node launched for it
// (ParseLaunch, replicas.launch). The fleet's intake writes them; the
// autoscaler, the endpoint pages and the node pages read them.
//
// It is a leaf of value types and their JSON: no I/O, no clock (the time a
// report was recorded is the caller's), no rule about what to do with the
// numbers.
package replica
