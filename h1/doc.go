// Package h1 serves an http.Handler over HTTP/1.1 with less work a request
// than net/http's server, for the gateway, where that work was a third of a
// proxied request's CPU (docs/gateway.md), and reads plain answers for the
// gateway's client to replicas the same way (ReadResponse).
//
// It owns the plain case only: a GET or POST in HTTP/1.1 whose head fits
// its buffer, with a Host, at most one Content-Length and no
// Transfer-Encoding, Expect or Upgrade, and whose target is a plain path.
// A connection whose next request is anything else (HTTP/1.0, a chunked
// body, 100-continue, an escaped path, a header it does not take as it is,
// TLS) is handed, with the bytes already read, to a net/http server with
// the same handler and timeouts, which serves it from then on: what h1
// serves, it serves as net/http would, and what it does not, net/http does.
//
// What a handler sees is net/http's: an *http.Request and an
// http.ResponseWriter that http.ResponseController can flush and set
// deadlines on. Answers are framed as net/http frames them: a handler that
// ends having written little gets a Content-Length, one that flushes or
// writes more is sent chunked, and a Content-Type is sniffed when none was
// set. Where it differs: a caller that leaves is noticed only once a
// request has run for watchAfter (net/http reads the connection beside
// every request), and it sends no trailers or 1xx answers and offers no
// Hijacker.
//
// It must not parse anything more loosely than net/http: the fuzz tests
// hold its parse of every head it accepts to http.ReadRequest's and of
// every answer to http.ReadResponse's.
package h1
