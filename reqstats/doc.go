// Package reqstats reads the per-version request statistics the gateways
// publish (ClickHouse request_stats, written by package ingest) and turns
// them into short time series for the portal and the API: requests per
// second, error rate, p50 and p99 latency and, for endpoints that stream,
// p50 and p99 time to first token and time per output token.
//
// It reads ClickHouse by endpoint name only and knows nothing of teams: the
// caller scopes first (handlers load the endpoint through the team-scoped
// endpoint.Service and pass its name). It never writes.
//
// Quantiles come from the summed histogram buckets (proto.LatencyBoundsUS)
// of every window that starts inside a step, by linear interpolation inside
// the bucket that holds the rank: bucket i spans (bound[i-1], bound[i]], the
// first from zero; a rank in the open last bucket reads as the last bound,
// so a quantile is never invented above what the histogram can say.
package reqstats
