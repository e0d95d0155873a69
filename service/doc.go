// Package service is the one lifecycle of every background loop in the
// platform: a Service is started with Start(ctx) and stopped with Stop(),
// and a Group starts a list of them together and stops them in reverse.
//
// Loops embed a Runner, whose Go starts the loop's goroutine and whose Stop
// cancels it and waits for it to end; periodic loops run their work with
// Tick on an injected clock, so tests move time by hand. Leader-only loops
// are wrapped by db.Lease, which starts them while this process holds the
// loop's advisory lock and stops them when it loses it.
//
// The package imports no I/O client: agents, gateways and the pure packages
// may use it.
package service
