package catalog

import (
	"fmt"
	"io"
	"math"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"modelplane/busapi"
)

// Field names one of Metrics' fields in Metrics.Has.
type Field uint

// Fields an adapter may find missing: a runtime (or a release of it) that
// does not export the metric leaves the field absent, which Has tells
// from a real 0.
const (
	FieldKV Field = 1 << iota
	FieldTokens
	FieldTTFT
	FieldGPUUtil
	FieldBatchQueue
	FieldPromptTokens
	FieldRequests
)

// Metrics are the heartbeat's fields an adapter reads from a runtime's
// metrics. A field the runtime does not export stays zero; for the
// fields of Field, Has says whether it was read.
type Metrics struct {
	// Has is the set of Field values the runtime exported.
	Has Field
	// QueueDepth counts requests received and waiting to execute.
	QueueDepth int
	// InFlight counts requests received and not yet answered.
	InFlight int
	// Requests counts requests answered since the runtime started,
	// successes and failures.
	Requests uint64
	// BatchSize is the mean executed batch since start (inferences per
	// execution); 0 before the first execution.
	BatchSize float64
	// KVUsedPct is the share of KV-cache in use, 0–100 (LLM runtimes).
	KVUsedPct float64
	// LoadSeconds and WarmupSeconds are the runtime's own cold start:
	// loading the model and warming it up (0 where it exports neither).
	LoadSeconds, WarmupSeconds float64
	// Tokens counts tokens generated since the runtime started, and
	// TTFTSeconds and TTFTCount are the sum and count of its times to
	// first token (LLM runtimes). They are counters: the driver turns two
	// readings into a rate and a mean over the time between them.
	Tokens      float64
	TTFTSeconds float64
	TTFTCount   float64
	// PromptTokens counts the prompt tokens of the requests the runtime
	// took in since it started (LLM runtimes), a counter too.
	PromptTokens float64
	// GPUUtil is the mean utilisation of the GPUs the runtime sees, a
	// share 0–1 (Triton's nv_gpu_utilization).
	GPUUtil float64
	// BatchQueueMS is the mean time a request waited in the queue before
	// it executed, in milliseconds, since start (Triton's
	// nv_inference_queue_duration_us over its requests, vLLM's
	// vllm:request_queue_time_seconds histogram). QueueCount is how many
	// requests that mean is over where it is not Requests (vLLM's
	// histogram count); 0: Requests.
	BatchQueueMS float64
	QueueCount   float64
}

// Reports says whether the runtime exported f.
func (m Metrics) Reports(f Field) bool { return m.Has&f != 0 }

// optional are the heartbeat's fields an adapter may find missing, by
// their JSON names (busapi.ReplicaStatus.Absent). The token counter
// stands behind two of them: the rate the driver makes and the counter.
var optional = []struct {
	f    Field
	name string
}{
	{FieldRequests, busapi.MetricRequests},
	{FieldKV, busapi.MetricKVUsedPct},
	{FieldTokens, busapi.MetricTokensPerSecond},
	{FieldTokens, busapi.MetricTokens},
	{FieldTTFT, busapi.MetricTTFTMS},
	{FieldGPUUtil, busapi.MetricGPUUtil},
	{FieldBatchQueue, busapi.MetricBatchQueueMS},
	{FieldPromptTokens, busapi.MetricPromptTokens},
}

// Absent names the fields of the heartbeat that m's runtime does not
// export (busapi.ReplicaStatus.Absent): they read 0 and mean unknown.
func (m Metrics) Absent() []string {
	var out []string
	for _, o := range optional {
		if !m.Reports(o.f) {
			out = append(out, o.name)
		}
	}
	return out
}

// TokenCounters are m's token counters as the heartbeat carries them
// (busapi.ReplicaStatus.Tokens and PromptTokens): nil where the runtime
// does not export one.
func (m Metrics) TokenCounters() (tokens, prompt *int64) {
	if m.Reports(FieldTokens) {
		n := int64(m.Tokens)
		tokens = &n
	}
	if m.Reports(FieldPromptTokens) {
		n := int64(m.PromptTokens)
		prompt = &n
	}
	return tokens, prompt
}

// Metric names the adapters read. Triton's are the built-in runtime's too.
const (
	tritonSuccess = "nv_inference_request_success"
	tritonFailure = "nv_inference_request_failure"
	tritonCount   = "nv_inference_count"
	tritonExec    = "nv_inference_exec_count"
	tritonPending = "nv_inference_pending_request_count"
	tritonQueueUS = "nv_inference_queue_duration_us"
	tritonGPUUtil = "nv_gpu_utilization"
	// InFlightMetric is the gauge of requests received and not yet
	// answered. Triton has none (its pending count is the queue only), so
	// the built-in runtime exports this one beside Triton's names; without
	// it in-flight falls back to the pending count. LoadMetric and
	// WarmupMetric are the built-in runtime's cold start, in seconds.
	InFlightMetric = "modelplane_runtime_inflight_requests"
	LoadMetric     = "modelplane_runtime_load_seconds"
	WarmupMetric   = "modelplane_runtime_warmup_seconds"

	vllmRunning = "vllm:num_requests_running"
	vllmWaiting = "vllm:num_requests_waiting"
	// vllmKV is vLLM's KV-cache share from 0.10 on (V1 engine);
	// vllmKVOld its name before, still exported as deprecated by some
	// releases. The adapter reads the new one, else the old one.
	vllmKV      = "vllm:kv_cache_usage_perc"
	vllmKVOld   = "vllm:gpu_cache_usage_perc"
	vllmSuccess = "vllm:request_success_total"
	vllmTokens  = "vllm:generation_tokens_total"
	vllmPrompt  = "vllm:prompt_tokens_total"
	vllmTTFT    = "vllm:time_to_first_token_seconds"
	vllmQueue   = "vllm:request_queue_time_seconds"

	llamaProcessing = "llamacpp:requests_processing"
	llamaDeferred   = "llamacpp:requests_deferred"
	llamaKV         = "llamacpp:kv_cache_usage_ratio"
	llamaTokens     = "llamacpp:tokens_predicted_total"
	llamaPrompt     = "llamacpp:prompt_tokens_total"
)

// maxMetricsBytes bounds what a metrics body may be; a runtime with more
// series than this is misconfigured, and the agent must not buffer it.
const maxMetricsBytes = 4 << 20

// Parse reads a Prometheus text exposition with the named adapter.
func Parse(adapter string, body io.Reader) (Metrics, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(io.LimitReader(body, maxMetricsBytes))
	if err != nil {
		return Metrics{}, fmt.Errorf("parse metrics: %w", err)
	}
	sum := func(name string) float64 {
		f := fams[name]
		if f == nil {
			return 0
		}
		var s float64
		for _, m := range f.GetMetric() {
			s += value(m)
		}
		return s
	}
	has := func(name string) bool { return fams[name] != nil }
	var m Metrics
	switch adapter {
	case AdapterTriton:
		m.QueueDepth = int(sum(tritonPending))
		m.InFlight = m.QueueDepth
		if has(InFlightMetric) {
			m.InFlight = int(sum(InFlightMetric))
		}
		m.Has |= FieldRequests
		m.Requests = uint64(sum(tritonSuccess) + sum(tritonFailure))
		if e := sum(tritonExec); e > 0 {
			m.BatchSize = sum(tritonCount) / e
		}
		m.LoadSeconds, m.WarmupSeconds = sum(LoadMetric), sum(WarmupMetric)
		if has(tritonQueueUS) {
			// Before the first request no request has waited: 0, reported.
			m.Has |= FieldBatchQueue
			if m.Requests > 0 {
				m.BatchQueueMS = sum(tritonQueueUS) / 1000 / float64(m.Requests)
			}
		}
		if f := fams[tritonGPUUtil]; f != nil && len(f.GetMetric()) > 0 {
			m.Has |= FieldGPUUtil
			m.GPUUtil = sum(tritonGPUUtil) / float64(len(f.GetMetric()))
		}
	case AdapterVLLM:
		m.QueueDepth = int(sum(vllmWaiting))
		m.InFlight = int(sum(vllmRunning) + sum(vllmWaiting))
		switch {
		case has(vllmKV):
			m.Has |= FieldKV
			m.KVUsedPct = 100 * sum(vllmKV)
		case has(vllmKVOld):
			m.Has |= FieldKV
			m.KVUsedPct = 100 * sum(vllmKVOld)
		}
		if has(vllmSuccess) {
			m.Has |= FieldRequests
			m.Requests = uint64(sum(vllmSuccess))
		}
		if has(vllmTokens) {
			m.Has |= FieldTokens
			m.Tokens = sum(vllmTokens)
		}
		if has(vllmPrompt) {
			m.Has |= FieldPromptTokens
			m.PromptTokens = sum(vllmPrompt)
		}
		if has(vllmTTFT) {
			m.Has |= FieldTTFT
			m.TTFTSeconds, m.TTFTCount = histogram(fams[vllmTTFT])
		}
		if has(vllmQueue) {
			// Before the first request nobody has waited: 0, reported.
			m.Has |= FieldBatchQueue
			sum, n := histogram(fams[vllmQueue])
			if n > 0 {
				m.BatchQueueMS, m.QueueCount = 1000*sum/n, n
			}
		}
	case AdapterLlamaCPP:
		m.QueueDepth = int(sum(llamaDeferred))
		m.InFlight = int(sum(llamaProcessing) + sum(llamaDeferred))
		if has(llamaKV) {
			m.Has |= FieldKV
			m.KVUsedPct = 100 * sum(llamaKV)
		}
		if has(llamaTokens) {
			m.Has |= FieldTokens
			m.Tokens = sum(llamaTokens)
		}
		if has(llamaPrompt) {
			m.Has |= FieldPromptTokens
			m.PromptTokens = sum(llamaPrompt)
		}
		// llama-server exports no request counter (it counts tokens):
		// Requests is absent, so requests/s is missing rather than 0, and
		// the meter counts no requests of it.
	default:
		return Metrics{}, fmt.Errorf("unknown metrics adapter %q", adapter)
	}
	m.KVUsedPct = math.Min(math.Max(m.KVUsedPct, 0), 100)
	return m, nil
}

// histogram sums the sample sums and counts of a histogram family over its
// series; zero when the runtime does not export it.
func histogram(f *dto.MetricFamily) (sum, count float64) {
	if f == nil {
		return 0, 0
	}
	for _, m := range f.GetMetric() {
		if h := m.GetHistogram(); h != nil {
			sum += h.GetSampleSum()
			count += float64(h.GetSampleCount())
		}
	}
	return sum, count
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Untyped != nil:
		return m.Untyped.GetValue()
	}
	return 0
}
