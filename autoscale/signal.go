package autoscale

import "fmt"

// Signal names a per-replica metric a policy can scale on. The names are the
// API's.
type Signal string

// The signals. RPS, InFlight, QueueDepth, BatchQueueMS, TokensPerSecond
// and PromptTokensPerSecond are per replica; GPUUtil and KVCache are
// fractions from 0 to 1.
//
// PromptTokensPerSecond is the prompt tokens of the requests a replica
// received per second: the prefill work asked of it, which neither the
// request count (prompts differ in length), nor in-flight requests, nor
// KV use (a prefill-bound replica holds few sequences) measures. Unlike the
// tokens it computed, it keeps growing with the load past what the
// replica can serve, so the desire says how many replicas the load needs.
const (
	RPS             Signal = "rps"
	InFlight        Signal = "in_flight"
	QueueDepth      Signal = "queue_depth"
	BatchQueueMS    Signal = "batch_queue_ms"
	GPUUtil         Signal = "gpu_util"
	KVCache         Signal = "kv_cache"
	TokensPerSecond Signal = "tokens_per_s"

	PromptTokensPerSecond Signal = "prompt_tokens_per_s"
)

// Signals lists every signal in the order a Sample stores them.
var Signals = []Signal{RPS, InFlight, QueueDepth, BatchQueueMS, GPUUtil, KVCache, TokensPerSecond, PromptTokensPerSecond}

const signalCount = 8 // at most 8: Sample.has is a byte

// index is s's slot in a Sample, or -1 for a name that is no signal.
func (s Signal) index() int {
	switch s {
	case RPS:
		return 0
	case InFlight:
		return 1
	case QueueDepth:
		return 2
	case BatchQueueMS:
		return 3
	case GPUUtil:
		return 4
	case KVCache:
		return 5
	case TokensPerSecond:
		return 6
	case PromptTokensPerSecond:
		return 7
	}
	return -1
}

// fraction reports whether s is a share from 0 to 1, whose target must be
// at most 1.
func (s Signal) fraction() bool { return s == GPUUtil || s == KVCache }

// backlog reports whether s measures work waiting rather than a rate: it
// stays on the replicas it queued on and does not fall when replicas are
// added, only once they take the new arrivals.
func (s Signal) backlog() bool { return s == QueueDepth || s == BatchQueueMS }

// Task is what the endpoint's model does; it decides which signals its
// replicas can report. The values are the registry's.
type Task string

// The tasks.
const (
	TaskClassification Task = "classification"
	TaskRegression     Task = "regression"
	TaskLLM            Task = "llm"
)

// reports reports whether a replica of task on a GPU (or not) reports s. A
// classic model has no KV cache and counts no tokens; a CPU replica has no
// GPU utilisation.
func (t Task) reports(s Signal, gpu bool) error {
	switch {
	case s.index() < 0:
		return fmt.Errorf("unknown signal %q", s)
	case (s == KVCache || s == TokensPerSecond || s == PromptTokensPerSecond) && t != TaskLLM:
		return fmt.Errorf("a %s endpoint does not report %s (LLM endpoints only)", t, s)
	case s == GPUUtil && !gpu:
		return fmt.Errorf("a CPU endpoint does not report %s", s)
	}
	return nil
}

// Sample is one ready replica's metrics at one evaluation: a value for each
// signal it reported. The zero Sample reports nothing.
type Sample struct {
	values [signalCount]float64
	has    uint8
	// why says, for a signal not reported, why not (Missing).
	why [signalCount]string
}

// Missing records why s was not reported ("kv_used_pct not reported by
// replica r-1 (llama-server)"), for the reason of a freeze on it. A Sample
// without it still reports nothing for s; Missing only explains.
func (m *Sample) Missing(s Signal, why string) {
	if i := s.index(); i >= 0 {
		m.why[i] = why
	}
}

// Set records v for s; a name that is no signal is ignored.
func (m *Sample) Set(s Signal, v float64) {
	if i := s.index(); i >= 0 {
		m.values[i] = v
		m.has |= 1 << i
	}
}

// Value is the value reported for s, and whether one was.
func (m Sample) Value(s Signal) (float64, bool) {
	i := s.index()
	if i < 0 || m.has&(1<<i) == 0 {
		return 0, false
	}
	return m.values[i], true
}
