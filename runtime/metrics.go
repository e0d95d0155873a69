package runtime

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Failure reasons of nv_inference_request_failure, Triton's values.
const (
	reasonRejected = "REJECTED" // queue timeout, draining: never executed
	reasonCanceled = "CANCELED" // the caller went away
	reasonBackend  = "BACKEND"  // the model failed
	reasonOther    = "OTHER"    // bad input
)

// metrics are Triton's inference metrics, with its names and its model
// and version labels, so that one adapter (and one dashboard) reads a
// built-in runtime and a Triton one alike. Durations are cumulative
// microseconds, as Triton's counters are; a batch's compute time counts
// once for each request in it, as in Triton.
type metrics struct {
	reg *prometheus.Registry

	success     prometheus.Counter
	failure     *prometheus.CounterVec
	count       prometheus.Counter
	execCount   prometheus.Counter
	requestUS   prometheus.Counter
	queueUS     prometheus.Counter
	computeUS   prometheus.Counter
	inFlight    prometheus.Gauge
	batchRows   prometheus.Gauge
	loadSec     prometheus.Gauge
	warmupSec   prometheus.Gauge
	failureBase map[string]prometheus.Counter
}

// newMetrics registers the series; pending reads the requests queued in
// the batcher, not yet executing, at each scrape (Triton's pending count).
func newMetrics(modelName, version string, pending func() float64) *metrics {
	reg := prometheus.NewRegistry()
	labels := prometheus.Labels{"model": modelName, "version": version}
	counter := func(name, help string) prometheus.Counter {
		c := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: labels})
		reg.MustRegister(c)
		return c
	}
	gauge := func(name, help string) prometheus.Gauge {
		g := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: labels})
		reg.MustRegister(g)
		return g
	}
	m := &metrics{reg: reg}
	m.success = counter("nv_inference_request_success", "Number of successful inference requests, all batch sizes")
	m.failure = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "nv_inference_request_failure",
		Help: "Number of failed inference requests, all batch sizes", ConstLabels: labels}, []string{"reason"})
	reg.MustRegister(m.failure)
	m.failureBase = map[string]prometheus.Counter{}
	for _, r := range []string{reasonRejected, reasonCanceled, reasonBackend, reasonOther} {
		m.failureBase[r] = m.failure.WithLabelValues(r) // present at 0 from the start
	}
	m.count = counter("nv_inference_count", "Number of inferences performed (rows; a request of n instances counts n)")
	m.execCount = counter("nv_inference_exec_count", "Number of model executions performed (batches)")
	m.requestUS = counter("nv_inference_request_duration_us", "Cumulative inference request duration in microseconds")
	m.queueUS = counter("nv_inference_queue_duration_us", "Cumulative inference queuing duration in microseconds")
	m.computeUS = counter("nv_inference_compute_infer_duration_us", "Cumulative compute inference duration in microseconds")
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "nv_inference_pending_request_count",
		Help: "Instantaneous number of pending requests awaiting execution", ConstLabels: labels}, pending))
	m.inFlight = gauge("modelplane_runtime_inflight_requests", "Inference requests being answered: queued, executing or being encoded")
	m.batchRows = gauge("modelplane_runtime_last_batch_size", "Rows of the last batch executed")
	// The replica's cold start after its files are on the node, which the
	// agent adds to its own download and verify times.
	m.loadSec = gauge("modelplane_runtime_load_seconds", "Time taken to load the model, from reading its directory to a model ready to run")
	m.warmupSec = gauge("modelplane_runtime_warmup_seconds", "Time taken to run the sample inputs before reporting ready")
	return m
}

func (m *metrics) failed(reason string) { m.failureBase[reason].Inc() }

func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
