// Package readcache keeps the answers of slow analytics reads (ClickHouse
// scans that no pre-aggregate can serve: drift distributions, the request
// explorer's notable requests) in memory, so a page polled every few
// seconds does not wait on a scan after its first one.
//
// Every answer carries the time it was read, by an injected clock. An
// answer younger than Options.Fresh is served as is; one older but younger
// than Options.MaxAge is served as is while one refresh per key reads it
// again in the background; one older than MaxAge is never served: the
// caller waits for a new read. A page polled at least every Fresh therefore
// always gets an answer at most Fresh plus one read's duration old, and
// never one older than MaxAge. Concurrent callers of a key that must wait
// share one read, which runs on a context of its own (bounded by
// Options.ReadTimeout): a caller that goes away fails neither the others
// waiting on it nor the answer kept. Failed reads are not kept.
//
// It knows nothing of what it caches: keys and values are the caller's,
// and the caller scopes (a key must name everything the answer depends on,
// the caller's teams included when they matter). It holds no connection
// and imports no I/O client.
package readcache
