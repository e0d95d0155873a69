package endpoint

import (
	"fmt"

	"modelplane/field"
)

// Batching is the built-in runtime's dynamic batcher of an endpoint's
// replicas (runtime/batch; serveapi.Config.Batching). Other runtimes
// (Triton, vLLM) batch by their own configuration and ignore it.
type Batching struct {
	// MaxBatchSize is the largest batch executed, in rows; 1 turns
	// batching off.
	MaxBatchSize int32 `json:"max_batch_size" minimum:"1" maximum:"1024" doc:"Largest batch the built-in runtime executes, in rows (1-1024); 1 turns batching off."`
	// MaxQueueDelayUS is the longest a request waits for others to join
	// its batch.
	MaxQueueDelayUS int32 `json:"max_queue_delay_us" minimum:"0" maximum:"1000000" doc:"Longest a request waits for others to join its batch, in microseconds (0-1000000); the adaptive window stays below it."`
	// PreferredBatchSizes, ascending and at most MaxBatchSize, are
	// executed as soon as a batch reaches one.
	PreferredBatchSizes []int32 `json:"preferred_batch_sizes" maxItems:"16" doc:"Batch sizes executed as soon as reached, ascending, each at most max_batch_size; empty for none."`
	// QueueTimeoutMS is how long a request may wait in the queue at all;
	// past it the request is answered 503 and never executed.
	QueueTimeoutMS int32 `json:"queue_timeout_ms" minimum:"1" maximum:"60000" doc:"How long a request may wait in the runtime's queue, in milliseconds (1-60000); past it the answer is 503 with Retry-After and the request is never executed."`
}

// DefaultBatching is what an endpoint batches with when its settings leave
// batching out: batches of up to 32 rows, a 500 µs wait at most, no
// preferred sizes, and 503 after a second in the queue. The migration that
// added the columns uses the same values.
var DefaultBatching = Batching{MaxBatchSize: 32, MaxQueueDelayUS: 500, PreferredBatchSizes: []int32{}, QueueTimeoutMS: 1000}

// orDefault returns b, or DefaultBatching when b is the zero value (a
// caller that set no batching at all). A MaxBatchSize of 0 with other
// fields set is not unset: it is refused by checkBatching.
func (b Batching) orDefault() Batching {
	if b.MaxBatchSize == 0 && b.MaxQueueDelayUS == 0 && len(b.PreferredBatchSizes) == 0 && b.QueueTimeoutMS == 0 {
		return DefaultBatching
	}
	if b.PreferredBatchSizes == nil {
		b.PreferredBatchSizes = []int32{}
	}
	return b
}

// checkBatching adds the errors of b to errs under field names the API
// uses (batching.max_batch_size, …).
func checkBatching(errs *field.Errors, b Batching) {
	if b.MaxBatchSize < 1 || b.MaxBatchSize > 1024 {
		errs.Add("batching.max_batch_size", "must be between 1 and 1024")
	}
	if b.MaxQueueDelayUS < 0 || b.MaxQueueDelayUS > 1_000_000 {
		errs.Add("batching.max_queue_delay_us", "must be between 0 and 1000000 (one second)")
	}
	if b.QueueTimeoutMS < 1 || b.QueueTimeoutMS > 60_000 {
		errs.Add("batching.queue_timeout_ms", "must be between 1 and 60000")
	}
	if len(b.PreferredBatchSizes) > 16 {
		errs.Add("batching.preferred_batch_sizes", "must list at most 16 sizes")
		return
	}
	for i, n := range b.PreferredBatchSizes {
		field := fmt.Sprintf("batching.preferred_batch_sizes[%d]", i)
		switch {
		case n < 1 || n > b.MaxBatchSize:
			errs.Add(field, "must be between 1 and max_batch_size (%d)", b.MaxBatchSize)
		case i > 0 && n <= b.PreferredBatchSizes[i-1]:
			errs.Add(field, "must be larger than the size before it: the sizes are ascending")
		}
	}
}

// batchingOf is the Batching of an endpoint's columns.
func batchingOf(maxSize, delayUS int32, preferred []int32, timeoutMS int32) Batching {
	if preferred == nil {
		preferred = []int32{}
	}
	return Batching{MaxBatchSize: maxSize, MaxQueueDelayUS: delayUS, PreferredBatchSizes: preferred, QueueTimeoutMS: timeoutMS}
}
