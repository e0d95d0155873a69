// Package reqstats reads the per-version request statistics the gateways
// publish (ClickHouse request_stats, written by package ingest) and turns
// them into short time series for the portal and the API: requests per
// second, error rate, p50 and p99 latency and, for endpoints that stream,
// p50 and p99 time to first token and time per output token.
//
// Whole minutes and hours are read from the pre-aggregates that ClickHouse
// migration 0013 feeds on insert (request_stats_minutely and
// request_stats_hourly): a window counts in the minute and hour its start
// falls in, as the raw reads count it, so both give the same figures
// (TestPreAggregatedReadsEqualRawReads). Only what is finer than a minute
// is read from raw windows, and the request explorer, which lists single
// requests, is served from a readcache when the Reader has one.
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
