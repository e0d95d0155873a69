// Package batch is the built-in runtime's dynamic batcher (seed §5):
// requests queue and are executed together, up to a maximum batch size, by
// one executor goroutine that calls the model. It owns the queue, the
// batching window and the queue timeout; it knows nothing of HTTP, JSON or
// metrics names (the runtime server maps its errors and counts its
// batches), and it reads time only from an injected quartz.Clock so that
// its tests run in virtual time.
package batch
