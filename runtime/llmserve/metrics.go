package llmserve

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metrics are the engine's series under vLLM's names and its model_name
// label, so the vLLM adapter reads this runtime as it reads vLLM.
type metrics struct {
	reg          *prometheus.Registry
	eng          *Engine
	ttft, queued prometheus.Histogram
}

func newMetrics(model string, eng *Engine) *metrics {
	m := &metrics{reg: prometheus.NewRegistry(), eng: eng}
	l := prometheus.Labels{"model_name": model}
	gauge := func(name, help string, f func() float64) {
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: l}, f))
	}
	counter := func(name, help string, f func() float64) {
		m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: l}, f))
	}
	c := &eng.stats
	read := func(p *int64) func() float64 {
		return func() float64 { c.mu.Lock(); defer c.mu.Unlock(); return float64(*p) }
	}
	gauge("vllm:num_requests_waiting", "Requests waiting to be processed.", func() float64 { return float64(eng.SchedulerStats().Waiting) })
	gauge("vllm:num_requests_running", "Requests in the running batch.", func() float64 { return float64(eng.SchedulerStats().Running) })
	// Pages requests hold, not cached ones nobody holds, as vLLM counts.
	gauge("vllm:kv_cache_usage_perc", "KV-cache usage; 1 means 100 percent.", func() float64 { return eng.SchedulerStats().KVUtilization })
	counter("vllm:prompt_tokens_total", "Prompt tokens of admitted requests.", read(&c.promptTokens))
	counter("vllm:generation_tokens_total", "Generated tokens.", read(&c.generationTokens))
	counter("vllm:prefix_cache_queries_total", "Prefix cache queries, in terms of number of queried tokens.",
		func() float64 { return float64(eng.SchedulerStats().PrefixQueries) })
	counter("vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens.",
		func() float64 { return float64(eng.SchedulerStats().PrefixHits) })
	counter("vllm:num_preemptions_total", "Sequences preempted and re-prefilled later.", read(&c.preemptions))
	counter("modelplane:prefill_computed_tokens_total", "Prompt tokens computed, re-prefills included.", read(&c.computedPrompt))
	m.reg.MustRegister(finishedCollector{desc: prometheus.NewDesc("vllm:request_success_total",
		"Requests finished, by finish reason.", []string{"finished_reason"}, l), c: c})
	m.ttft = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "vllm:time_to_first_token_seconds", Help: "Time to first token.",
		ConstLabels: l, Buckets: latencyBuckets})
	m.queued = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "vllm:request_queue_time_seconds",
		Help: "Time requests waited before a step first ran them.", ConstLabels: l, Buckets: latencyBuckets})
	m.reg.MustRegister(m.ttft, m.queued)
	return m
}

// finishedCollector is vllm:request_success_total: the generations the
// engine ended, by vLLM's finish reasons (a cancelled one is "abort"),
// each series there from the start so that an idle runtime reports 0
// requests rather than none. The agent reads it as the replica's requests
// counter, which requests/s and the meter's request counts come from.
type finishedCollector struct {
	desc *prometheus.Desc
	c    *counters
}

// finishReasons are the series, the engine's reason to vLLM's.
var finishReasons = [...][2]string{{"stop", "stop"}, {"length", "length"}, {"cancelled", "abort"}, {"error", "error"}}

func (f finishedCollector) Describe(ch chan<- *prometheus.Desc) { ch <- f.desc }

func (f finishedCollector) Collect(ch chan<- prometheus.Metric) {
	var n [len(finishReasons)]int64
	f.c.mu.Lock()
	for i, r := range finishReasons {
		n[i] = f.c.finished[r[0]]
	}
	f.c.mu.Unlock()
	for i, r := range finishReasons {
		ch <- prometheus.MustNewConstMetric(f.desc, prometheus.CounterValue, float64(n[i]), r[1])
	}
}

// latencyBuckets are the histograms' bounds, in seconds.
var latencyBuckets = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80}

func (m *metrics) handler() http.Handler {
	h := promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := &m.eng.stats
		c.mu.Lock()
		for _, v := range c.ttft {
			m.ttft.Observe(v)
		}
		for _, v := range c.queued {
			m.queued.Observe(v)
		}
		c.ttft, c.queued = c.ttft[:0], c.queued[:0]
		c.mu.Unlock()
		h.ServeHTTP(w, r)
	})
}
