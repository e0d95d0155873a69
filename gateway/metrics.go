package gateway

import (
	"maps"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metricBuckets are the seconds buckets of the gateway's histograms (the
// Prometheus base unit): fine below a millisecond, where the platform
// overhead lives, and coarse up to a minute.
var metricBuckets = [...]float64{0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

// statusClasses label the request duration by status class; index s/100.
var statusClasses = [...]string{"", "1xx", "2xx", "3xx", "4xx", "5xx"}

// metrics are the gateway's Prometheus series, in a registry of its own.
// The request path finds the label children of its endpoint × version in a
// copy-on-write map (no lock, no allocation once created), as the
// statistics recorder does.
type metrics struct {
	reg *prometheus.Registry

	duration *prometheus.HistogramVec
	overhead *prometheus.HistogramVec
	ttft     *prometheus.HistogramVec
	itl      *prometheus.HistogramVec
	streams  *prometheus.GaugeVec
	tokens   *prometheus.CounterVec
	// ejections counts replicas ejected after consecutive failures.
	ejections prometheus.Counter
	// hold is how long requests of endpoints scaled to zero were held,
	// by outcome (hold.go).
	hold      *prometheus.HistogramVec
	children  atomic.Pointer[map[statsKey]*metricChildren]
	childrenM sync.Mutex
}

// metricChildren are the label children of one endpoint × version, and
// the exemplar gates of its latency histograms.
type metricChildren struct {
	duration   [len(statusClasses)]prometheus.Observer
	durationEx [len(statusClasses)]exemplarGate
	overhead   prometheus.Observer
	overheadEx exemplarGate
	ttft       prometheus.Observer
	ttftEx     exemplarGate
	itl        prometheus.Observer
	streams    prometheus.Gauge
	tokens     prometheus.Counter
}

func newMetrics(g *Gateway) *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	hist := func(name, help string, labels ...string) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: metricBuckets[:]}, labels)
	}
	m.duration = hist("ml_serving_request_duration_seconds", "End-to-end latency through the gateway, in seconds.", "endpoint", "version", "status_class")
	m.overhead = hist("ml_serving_platform_overhead_seconds", "Gateway-added latency: time in the gateway minus time waiting on the replica, in seconds.", "endpoint", "version")
	m.ttft = hist("ml_serving_ttft_seconds", "Time to the first streamed event, in seconds.", "endpoint", "version")
	m.itl = hist("ml_serving_inter_token_latency_seconds", "Mean time per output token after the first of each stream, in seconds.", "endpoint", "version")
	m.streams = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "ml_serving_concurrent_streams", Help: "Server-sent event streams being relayed."}, []string{"endpoint", "version"})
	m.tokens = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ml_serving_tokens_total", Help: "Completion tokens streamed."}, []string{"endpoint", "version"})
	m.ejections = prometheus.NewCounter(prometheus.CounterOpts{Name: "ml_serving_replica_ejections_total",
		Help: "Replicas skipped for a cool-down after consecutive connect errors or 5xx answers."})
	m.hold = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "ml_serving_scale_from_zero_wait_seconds",
		Help:    "Time a request of an endpoint scaled to zero was held for a replica to start, in seconds, by outcome: served (a replica was ready within the cold-start budget), expired (202 past it), left (the caller went away).",
		Buckets: holdBuckets}, []string{"endpoint", "outcome"})
	empty := map[statsKey]*metricChildren{}
	m.children.Store(&empty)
	m.reg.MustRegister(m.duration, m.overhead, m.ttft, m.itl, m.streams, m.tokens, m.ejections, m.hold,
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "ml_serving_scale_from_zero_queue_full_total",
			Help: "Requests of an endpoint scaled to zero answered 202 at once because its hold queue was full."},
			func() float64 { return float64(g.holds.full.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "ml_serving_shadow_requests_total",
			Help: "Requests mirrored to a shadow version's replica."},
			func() float64 { return float64(g.shadowSent.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "ml_serving_shadow_dropped_total",
			Help: "Mirrored requests dropped: every shadow worker busy, or no ready shadow replica."},
			func() float64 { return float64(g.shadowDropped.Load()) }),
		inFlightCollector{g},
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "ml_serving_request_stats_dropped_total",
			Help: "Request statistics windows of an endpoint version dropped because NATS did not acknowledge them in time."},
			func() float64 { return float64(g.stats.dropped.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "ml_serving_prediction_samples_dropped_total",
			Help: "Prediction samples dropped: queue full, NATS slow or down, or an unreadable answer."},
			func() float64 { return float64(g.samples.counters().Dropped) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "ml_serving_prediction_samples_published_total",
			Help: "Prediction samples JetStream acknowledged."},
			func() float64 { return float64(g.samples.counters().Published) }),
	)
	return m
}

// holdBuckets are the seconds buckets of the scale-from-zero wait: a CPU
// replica starts in seconds, a GPU one within its budget of minutes.
var holdBuckets = []float64{0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 45, 60, 90, 120, 180, 300}

// Outcomes of a held request (ml_serving_scale_from_zero_wait_seconds).
const (
	outcomeServed  = "served"
	outcomeExpired = "expired"
	outcomeLeft    = "left"
)

// held records how long a request of endpoint was held, and how it ended.
func (m *metrics) held(endpoint, outcome string, d time.Duration) {
	m.hold.WithLabelValues(endpoint, outcome).Observe(d.Seconds())
}

// handler serves the registry, in OpenMetrics to a scraper that asks for
// it (the only format that carries exemplars).
func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg, EnableOpenMetrics: true})
}

func (m *metrics) of(endpoint, version string) *metricChildren {
	k := statsKey{endpoint: endpoint, version: version}
	if c := (*m.children.Load())[k]; c != nil {
		return c
	}
	m.childrenM.Lock()
	defer m.childrenM.Unlock()
	old := *m.children.Load()
	if c := old[k]; c != nil {
		return c
	}
	c := &metricChildren{overhead: m.overhead.WithLabelValues(endpoint, version),
		ttft: m.ttft.WithLabelValues(endpoint, version), itl: m.itl.WithLabelValues(endpoint, version),
		streams: m.streams.WithLabelValues(endpoint, version), tokens: m.tokens.WithLabelValues(endpoint, version)}
	for i := 1; i < len(statusClasses); i++ {
		c.duration[i] = m.duration.WithLabelValues(endpoint, version, statusClasses[i])
	}
	n := maps.Clone(old)
	n[k] = c
	m.children.Store(&n)
	return c
}

// observe records one finished request routed to a version (c.ver set). upstream is the
// time spent waiting on the replica, zero when none was called.
func (m *metrics) observe(c *call, total time.Duration) {
	ch := c.ver.metricsOf(m, c.endpoint)
	class := min(max(c.status/100, 1), len(statusClasses)-1)
	// A request with a trace id, sampled or not, leaves it as the
	// exemplar of the buckets it lands in, so a slow or failed request on
	// a dashboard leads to its trace and its log line.
	at := c.start.Add(total).UnixNano()
	ch.durationEx[class].observe(ch.duration[class], total.Seconds(), c.traceID, at)
	if c.upstream > 0 {
		ch.overheadEx.observe(ch.overhead, max(total-c.upstream, 0).Seconds(), c.traceID, at)
	}
	if c.streamed && !c.firstEvent.IsZero() {
		ttft := c.firstEvent.Sub(c.start)
		ch.ttftEx.observe(ch.ttft, ttft.Seconds(), c.traceID, at)
		if c.tokens >= 2 {
			ch.itl.Observe(((total - ttft) / time.Duration(c.tokens-1)).Seconds())
		}
		if c.tokens > 0 {
			ch.tokens.Add(float64(c.tokens))
		}
	}
}

// exemplarEvery is how often at most a bucket of a latency histogram
// takes a new exemplar. Prometheus keeps one exemplar a bucket and reads
// it once a scrape, and an exemplar costs about fifteen times an
// observation (9 allocations), so replacing it on every traced request
// would be most of what tracing costs the gateway. A rare bucket (the
// slow requests) still takes the first request that lands in it.
const exemplarEvery = time.Second

// exemplarGate is when each bucket of one histogram series last took an
// exemplar, in Unix nanoseconds.
type exemplarGate [len(metricBuckets) + 1]atomic.Int64

// observe records v in o, with the exemplar trace_id=traceID when there is
// a trace id and v's bucket has not taken one for exemplarEvery before
// at (Unix nanoseconds).
func (e *exemplarGate) observe(o prometheus.Observer, v float64, traceID string, at int64) {
	if traceID != "" {
		b := &e[sort.SearchFloat64s(metricBuckets[:], v)]
		last := b.Load()
		if at-last >= int64(exemplarEvery) && b.CompareAndSwap(last, at) {
			if eo, ok := o.(prometheus.ExemplarObserver); ok {
				eo.ObserveWithExemplar(v, prometheus.Labels{"trace_id": traceID})
				return
			}
		}
	}
	o.Observe(v)
}

// streaming counts a stream of v (a version of endpoint) as relayed until
// the returned function is called.
func (m *metrics) streaming(endpoint string, v *version) func() {
	g := v.metricsOf(m, endpoint).streams
	g.Inc()
	return g.Dec
}

// inFlightCollector reports the requests outstanding at each endpoint ×
// version from the replicas' counters in the routing table, at scrape time,
// so the request path pays nothing for it.
type inFlightCollector struct{ g *Gateway }

var inFlightDesc = prometheus.NewDesc("ml_serving_in_flight_requests",
	"Requests sent to a replica and not yet answered.", []string{"endpoint", "version"}, nil)

func (c inFlightCollector) Describe(ch chan<- *prometheus.Desc) { ch <- inFlightDesc }

func (c inFlightCollector) Collect(ch chan<- prometheus.Metric) {
	for name, rt := range c.g.routes.Load().byName {
		for _, v := range rt.versions {
			var n int64
			for _, u := range v.upstreams {
				n += u.inFlight.Load()
			}
			ch <- prometheus.MustNewConstMetric(inFlightDesc, prometheus.GaugeValue, float64(n), name, v.name)
		}
	}
}
