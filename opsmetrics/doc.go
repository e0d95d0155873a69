// Package opsmetrics exports the fleet's state as Prometheus metrics on the
// control plane's admin listener: the seed's per-endpoint and per-version
// series (replicas wanted and ready, GPU utilisation, queue depth, batch
// size, KV-cache use, tokens per second, cold starts, cost per hour) and
// per-node ones (slices and cores used, heartbeat age), read from what the
// heartbeats stored in PostgreSQL.
//
// It reads at scrape time, with one query per table family and a short
// cache so that several scrapers cost one read, and it exports a field a
// runtime did not report as no series at all, never as a measured zero.
// Labels are platform names (team, endpoint, version, node, replica, GPU
// index), never request data. It reads every team's rows: /metrics is for
// operators on the admin listener, never served to a team.
//
// It must not write, and it owns no rule: what a replica's metrics mean is
// package replica's (replica.Metrics), what a second costs is billing's.
package opsmetrics
