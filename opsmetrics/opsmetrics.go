package opsmetrics

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/coder/quartz"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"modelplane/billing"
	"modelplane/busapi"
	"modelplane/db"
	"modelplane/replica"
)

// cacheFor is how long one read serves scrapes: several Prometheus servers
// (or a scrape and a rule evaluation) within it cost one read.
const cacheFor = 5 * time.Second

// readTimeout bounds one read, well under a scrape's usual 10 s timeout.
const readTimeout = 3 * time.Second

var (
	replicaLabels  = []string{"team", "endpoint", "version", "replica", "node"}
	endpointLabels = []string{"team", "endpoint"}
	versionLabels  = []string{"team", "endpoint", "version"}
	nodeLabels     = []string{"node"}
	gpuLabels      = []string{"node", "gpu"}
)

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, labels, nil)
}

// The series, by family. Names follow Prometheus conventions: base units
// (_seconds, _bytes, _ratio), _total for counters.
var (
	replicasDesc = desc("ml_serving_replicas", "Replicas of a version by state (placed, starting, ready, failed).", append(versionLabels, "state")...)
	wantedDesc   = desc("ml_serving_replicas_wanted", "Replicas an endpoint should have: the autoscaler's last count, else its minimum.", endpointLabels...)
	minDesc      = desc("ml_serving_replicas_min", "An endpoint's minimum replicas.", endpointLabels...)
	maxDesc      = desc("ml_serving_replicas_max", "An endpoint's maximum replicas.", endpointLabels...)
	costDesc     = desc("ml_serving_cost_usd_per_hour", "What a version's allocations cost per hour at the rates in force now.", versionLabels...)

	queueDesc     = desc("ml_serving_queue_depth", "Requests waiting to execute in a replica.", replicaLabels...)
	inFlightDesc  = desc("ml_serving_replica_in_flight_requests", "Requests a replica received and has not answered, queued ones included.", replicaLabels...)
	batchDesc     = desc("ml_serving_batch_size", "A replica's mean executed batch, or the sequences in an LLM engine's batch.", replicaLabels...)
	kvDesc        = desc("ml_serving_kv_cache_utilization_ratio", "Share of an LLM replica's KV cache in use, 0 to 1.", replicaLabels...)
	tokensDesc    = desc("ml_serving_tokens_per_second", "An LLM replica's generation rate over its last few seconds.", replicaLabels...)
	gpuUtilDesc   = desc("ml_serving_replica_gpu_utilization_ratio", "A replica's GPU utilisation as its agent reported it, 0 to 1.", replicaLabels...)
	queueWaitDesc = desc("ml_serving_queue_wait_seconds", "Mean wait in a replica's batcher.", replicaLabels...)
	coldDesc      = desc("ml_serving_cold_start_seconds", "How long a replica took to become ready: download, verify, load and warm-up.", replicaLabels...)
	failuresDesc  = desc("ml_serving_replica_failures", "Failures of a replica in a row as its agent reports them; it grows while the replica crash-loops.", replicaLabels...)

	nodeUpDesc      = desc("modelplane_node_up", "1 while a node's lease holds, 0 once it is lost.", nodeLabels...)
	nodeAgeDesc     = desc("modelplane_node_heartbeat_age_seconds", "Time since a node's last heartbeat.", nodeLabels...)
	slicesDesc      = desc("modelplane_node_slices", "A node's allocatable GPU units (whole GPUs and MIG partitions).", nodeLabels...)
	slicesUsedDesc  = desc("modelplane_node_slices_used", "A node's GPU units held by replicas.", nodeLabels...)
	coresDesc       = desc("modelplane_node_cpu_cores", "A CPU node's allocatable cores.", nodeLabels...)
	coresUsedDesc   = desc("modelplane_node_cpu_cores_used", "A CPU node's cores held by replicas.", nodeLabels...)
	gpuUtilNodeDesc = desc("ml_serving_gpu_utilization_ratio", "A GPU's utilisation as its node reported it, 0 to 1.", gpuLabels...)
	gpuMemUsedDesc  = desc("ml_serving_gpu_memory_used_bytes", "A GPU's memory in use as its node reported it.", gpuLabels...)
	gpuMemDesc      = desc("ml_serving_gpu_memory_total_bytes", "A GPU's memory.", gpuLabels...)

	finishedDesc = desc("ml_serving_rollouts_finished_total", "Rollouts of an endpoint that ended, by how: rolled_back or completed.", "endpoint", "state")
	activeDesc   = desc("ml_serving_rollouts_active", "Rollouts of an endpoint under way, by state (starting, progressing, awaiting_approval, promoted).", "endpoint", "state")
	slaDesc      = desc("ml_serving_sla_p99_latency_seconds", "The p99 latency a version's SLA states, for each endpoint routing to it.", versionLabels...)
	upDesc       = desc("modelplane_fleet_metrics_up", "1 when the last read of the fleet's state for these metrics succeeded.")
)

var all = []*prometheus.Desc{replicasDesc, wantedDesc, minDesc, maxDesc, costDesc, queueDesc, inFlightDesc, batchDesc, kvDesc,
	tokensDesc, gpuUtilDesc, queueWaitDesc, coldDesc, failuresDesc, nodeUpDesc, nodeAgeDesc, slicesDesc, slicesUsedDesc,
	coresDesc, coresUsedDesc, gpuUtilNodeDesc, gpuMemUsedDesc, gpuMemDesc, finishedDesc, activeDesc, slaDesc, upDesc}

// Collector is a prometheus.Collector of the fleet's state.
type Collector struct {
	pool  *pgxpool.Pool
	clock quartz.Clock
	log   *slog.Logger

	mu     sync.Mutex
	readAt time.Time
	last   []prometheus.Metric
	ok     bool
}

// New returns a collector reading pool, with clock for the heartbeat ages,
// the rates in force and its cache.
func New(pool *pgxpool.Pool, clock quartz.Clock, log *slog.Logger) *Collector {
	return &Collector{pool: pool, clock: clock, log: log}
}

// Describe sends every family's description.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range all {
		ch <- d
	}
}

// Collect reads the fleet's state (or reuses a read younger than cacheFor)
// and sends its series. A failed read sends only modelplane_fleet_metrics_up
// 0, so an alert sees the gap instead of stale figures.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	now := c.clock.Now()
	if c.readAt.IsZero() || now.Sub(c.readAt) >= cacheFor {
		ctx, cancel := context.WithTimeout(context.Background(), readTimeout)
		ms, err := c.read(ctx, now)
		cancel()
		c.readAt, c.last, c.ok = now, ms, err == nil
		if err != nil {
			c.log.Warn("fleet metrics", slog.String("error", err.Error()))
		}
	}
	ms, ok := c.last, c.ok
	c.mu.Unlock()
	for _, m := range ms {
		ch <- m
	}
	up := 0.0
	if ok {
		up = 1
	}
	ch <- prometheus.MustNewConstMetric(upDesc, prometheus.GaugeValue, up)
}

// read reads every family once and builds the series.
func (c *Collector) read(ctx context.Context, now time.Time) ([]prometheus.Metric, error) {
	q := db.New(c.pool)
	replicas, err := q.OpsReplicaList(ctx)
	if err != nil {
		return nil, fmt.Errorf("replicas: %w", err)
	}
	nodes, err := q.OpsNodeList(ctx)
	if err != nil {
		return nil, fmt.Errorf("nodes: %w", err)
	}
	endpoints, err := q.OpsEndpointList(ctx)
	if err != nil {
		return nil, fmt.Errorf("endpoints: %w", err)
	}
	rollouts, err := q.OpsRolloutCounts(ctx)
	if err != nil {
		return nil, fmt.Errorf("rollouts: %w", err)
	}
	slas, err := q.OpsVersionSLAList(ctx)
	if err != nil {
		return nil, fmt.Errorf("latency targets: %w", err)
	}
	rates, err := billing.LoadRates(ctx, q)
	if err != nil {
		return nil, err
	}
	var b builder
	b.replicas(replicas, rates, now)
	b.endpoints(endpoints)
	b.nodes(nodes, now)
	// Every endpoint has both finished counters, 0 before its first, so
	// that the first rollback is an increase an alert sees.
	finished := map[string]map[string]int64{}
	for _, e := range endpoints {
		finished[e.Endpoint] = map[string]int64{"rolled_back": 0, "completed": 0}
	}
	for _, r := range rollouts {
		if n, ok := finished[r.Endpoint][r.State]; ok {
			finished[r.Endpoint][r.State] = n + r.N
		} else if r.State != "rolled_back" && r.State != "completed" {
			b.add(activeDesc, prometheus.GaugeValue, float64(r.N), r.Endpoint, r.State)
		}
	}
	for _, e := range endpoints {
		for _, state := range []string{"completed", "rolled_back"} {
			b.add(finishedDesc, prometheus.CounterValue, float64(finished[e.Endpoint][state]), e.Endpoint, state)
		}
	}
	for _, v := range slas {
		b.add(slaDesc, prometheus.GaugeValue, v.P99LatencyMs/1000, v.Team, v.Endpoint, v.Version)
	}
	return b.ms, nil
}

type builder struct{ ms []prometheus.Metric }

func (b *builder) add(d *prometheus.Desc, t prometheus.ValueType, v float64, labels ...string) {
	b.ms = append(b.ms, prometheus.MustNewConstMetric(d, t, v, labels...))
}

type versionKey struct{ team, endpoint, version string }

// replicas adds the per-replica series, and per version the replicas by
// state and the cost per hour.
func (b *builder) replicas(rows []db.OpsReplicaListRow, rates *billing.Rates, now time.Time) {
	type stateKey struct {
		versionKey
		state string
	}
	states := map[stateKey]int{}
	cost := map[versionKey]int64{} // micro-USD per hour
	var order []versionKey
	for _, r := range rows {
		vk := versionKey{r.Team, r.Endpoint, r.Version}
		if _, seen := cost[vk]; !seen {
			cost[vk] = 0
			order = append(order, vk)
		}
		states[stateKey{vk, r.State}]++
		units := int64(r.Slices)
		if r.GPUType == busapi.CPUType {
			units = int64(r.CPUCores)
		}
		if rate, ok := rates.At(r.GPUType, r.Profile, now); ok {
			cost[vk] += units * rate
		}
		labels := []string{r.Team, r.Endpoint, r.Version, r.Name, r.Node}
		b.add(failuresDesc, prometheus.GaugeValue, float64(r.Failures), labels...)
		m := replica.ParseMetrics(r.Metrics)
		if m.ObservedAtMS == 0 {
			continue // no heartbeat reported its load yet
		}
		gauge := func(d *prometheus.Desc, field string, v float64) {
			if m.Reports(field) {
				b.add(d, prometheus.GaugeValue, v, labels...)
			}
		}
		gauge(queueDesc, busapi.MetricQueueDepth, float64(m.QueueDepth))
		gauge(inFlightDesc, busapi.MetricInFlight, float64(m.InFlight))
		gauge(batchDesc, busapi.MetricBatchSize, m.BatchSize)
		gauge(kvDesc, busapi.MetricKVUsedPct, m.KVUsedPct/100)
		gauge(tokensDesc, busapi.MetricTokensPerSecond, m.TokensPerSecond)
		gauge(gpuUtilDesc, busapi.MetricGPUUtil, m.GPUUtil)
		gauge(queueWaitDesc, busapi.MetricBatchQueueMS, m.BatchQueueMS/1000)
		if t := m.ColdStart.TotalMS(); t > 0 {
			b.add(coldDesc, prometheus.GaugeValue, float64(t)/1000, labels...)
		}
	}
	for k, n := range states {
		b.add(replicasDesc, prometheus.GaugeValue, float64(n), k.team, k.endpoint, k.version, k.state)
	}
	for _, k := range order {
		b.add(costDesc, prometheus.GaugeValue, float64(cost[k])/1e6, k.team, k.endpoint, k.version)
	}
}

// endpoints adds each endpoint's bounds and wanted replicas.
func (b *builder) endpoints(rows []db.OpsEndpointListRow) {
	for _, e := range rows {
		wanted := e.Desired
		if wanted < 0 {
			wanted = e.MinReplicas
		}
		b.add(wantedDesc, prometheus.GaugeValue, float64(wanted), e.Team, e.Endpoint)
		b.add(minDesc, prometheus.GaugeValue, float64(e.MinReplicas), e.Team, e.Endpoint)
		b.add(maxDesc, prometheus.GaugeValue, float64(e.MaxReplicas), e.Team, e.Endpoint)
	}
}

// nodes adds each node's lease, heartbeat age, capacity and use, and its
// GPUs' reported use.
func (b *builder) nodes(rows []db.OpsNodeListRow, now time.Time) {
	for _, n := range rows {
		up := 0.0
		if n.State == "ready" {
			up = 1
		}
		b.add(nodeUpDesc, prometheus.GaugeValue, up, n.Name)
		b.add(nodeAgeDesc, prometheus.GaugeValue, max(now.Sub(n.LastHeartbeat).Seconds(), 0), n.Name)
		b.add(slicesDesc, prometheus.GaugeValue, float64(n.Slices), n.Name)
		b.add(slicesUsedDesc, prometheus.GaugeValue, float64(n.SlicesUsed), n.Name)
		if n.CPUCores > 0 {
			b.add(coresDesc, prometheus.GaugeValue, float64(n.CPUCores), n.Name)
			b.add(coresUsedDesc, prometheus.GaugeValue, float64(n.CoresUsed), n.Name)
		}
		// The inventory (as registered) has each GPU's memory, the use
		// (as last reported) its utilisation and memory in use; both are
		// busapi.GPU fields under the same JSON names.
		var inv, use []busapi.GPU
		if json.Unmarshal(n.Inventory, &inv) != nil || json.Unmarshal(n.GPUUse, &use) != nil {
			continue
		}
		for _, g := range inv {
			b.add(gpuMemDesc, prometheus.GaugeValue, float64(g.MemoryMB)*(1<<20), n.Name, strconv.Itoa(g.Index))
		}
		for _, g := range use {
			idx := strconv.Itoa(g.Index)
			b.add(gpuUtilNodeDesc, prometheus.GaugeValue, g.UtilPct/100, n.Name, idx)
			b.add(gpuMemUsedDesc, prometheus.GaugeValue, float64(g.MemoryUsedMB)*(1<<20), n.Name, idx)
		}
	}
}
