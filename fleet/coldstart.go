package fleet

import "github.com/prometheus/client_golang/prometheus"

// coldStartBuckets are the seconds buckets of a replica's cold start: a CPU
// replica of a small model starts in about a second, a GPU replica that
// downloads tens of gigabytes of weights in minutes.
var coldStartBuckets = []float64{0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1200}

// newColdStartMetric is the histogram of replica cold starts per endpoint
// and version: download, verify, load and warm-up as the heartbeat that
// first shows the replica ready reports them (the query
// VersionRecordColdStarts counts each replica once). The same figures, the
// latest five per version, give the Retry-After of an endpoint scaled to
// zero (package route).
func newColdStartMetric() *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "modelplane_fleet_replica_cold_start_seconds",
		Help:    "Replica cold start (download, verify, load and warm-up) until ready, in seconds, per endpoint and version.",
		Buckets: coldStartBuckets,
	}, []string{"endpoint", "version"})
}
