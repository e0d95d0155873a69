// Package scrape tells Prometheus where the runtimes' metrics are: the
// targets of Prometheus's HTTP service discovery (http_sd_configs), one
// group per ready replica whose runtime serves Prometheus text, labelled
// with the replica's endpoint, version, team, node and runtime.
//
// It reads the replicas table and the runtime catalogue and nothing else.
// Its labels are names operators chose (teams, endpoints, versions, nodes),
// never request data; they still name every team, so the list is served
// only where /metrics is, on the control plane's admin listener.
package scrape
