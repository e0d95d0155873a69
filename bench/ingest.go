package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"modelplane/billing"
	"modelplane/busapi"
	"modelplane/db"
	"modelplane/ingest"
)

// IngestResult is what `modelplane bench ingest` prints.
type IngestResult struct {
	Name string `json:"name"`
	// RowsPerS is rows stored in ClickHouse per second in the burst phase,
	// from the agents' first publish to the insert that stored the last row.
	RowsPerS float64 `json:"rows_per_s"`
	// LagP99S is the 99th percentile, over the burst's batches, of the time
	// from an agent's publish call to ClickHouse accepting the insert that
	// stored the batch (the consumer acks right after). The agents publish
	// faster than the consumer stores, so this is mostly the time to drain
	// the burst: it grows with its length (SimSeconds).
	LagP99S float64 `json:"lag_p99_s"`
	// RawPublishRowsPerS is the same agents publishing the same batches
	// into a scratch stream with nothing consuming it: JetStream's own
	// ceiling on this machine.
	RawPublishRowsPerS float64 `json:"raw_publish_rows_per_s"`

	LagP50S float64 `json:"lag_p50_s"`
	// RealtimeLagP99S is the same lag with the fleet publishing at its real
	// pace, every agent one batch a second, for RealtimeSeconds: what an
	// operator sees in production.
	RealtimeLagP99S float64 `json:"realtime_lag_p99_s"`
	// VsRawPublish is RowsPerS over RawPublishRowsPerS.
	VsRawPublish float64 `json:"vs_raw_publish"`
	// UsageDrainRowsPerS is gpu_usage rows stored per second by the usage
	// consumer draining MP_USAGE, which holds DrainSeconds more seconds of
	// the fleet (Rows rows again) before it starts, from its Start to the
	// insert that stored the last row: the ingest path alone, as the small
	// streams are timed.
	UsageDrainRowsPerS float64 `json:"usage_drain_rows_per_s"`
	// ClickHouseRowsPerS is ClickHouse's own ceiling for the drain's rows:
	// the same rows, attributed and priced, sent by one writer through the
	// consumers' own insert code (ingest.SendColumns) in inserts of
	// 200,000 rows over the native protocol into gpu_usage (and so its
	// rollups) of a second database of the same ClickHouse, migrated
	// alike; timed right before and right after the drain, and the mean
	// of the two, so that both see the same moments of a shared machine.
	// UsageVsClickHouse is UsageDrainRowsPerS over it.
	ClickHouseRowsPerS float64 `json:"clickhouse_rows_per_s"`
	UsageVsClickHouse  float64 `json:"usage_vs_clickhouse"`
	// PredictionRowsPerS is prediction_samples rows stored per second by
	// the predictions consumer draining MP_PREDICTIONS, which holds
	// PredictionSamples samples of 4 instances each, in PredictionMessages
	// gateway batches, before it starts;
	// PredictionClickHouseRowsPerS the tight writer's rate for the same
	// rows, timed as for usage, and PredictionsVsClickHouse the first over
	// the second.
	PredictionRowsPerS           float64 `json:"prediction_rows_per_s"`
	PredictionClickHouseRowsPerS float64 `json:"prediction_clickhouse_rows_per_s"`
	PredictionsVsClickHouse      float64 `json:"predictions_vs_clickhouse"`
	PredictionSamples            int     `json:"prediction_samples"`
	PredictionMessages           int     `json:"prediction_messages"`
	// ReqStatsRowsPerS and the rest are the same for request statistics,
	// ReqStatsWindows windows (a row each) in ReqStatsMessages gateway
	// batches.
	ReqStatsRowsPerS           float64 `json:"reqstats_rows_per_s"`
	ReqStatsClickHouseRowsPerS float64 `json:"reqstats_clickhouse_rows_per_s"`
	ReqStatsVsClickHouse       float64 `json:"reqstats_vs_clickhouse"`
	ReqStatsWindows            int     `json:"reqstats_windows"`
	ReqStatsMessages           int     `json:"reqstats_messages"`
	// CPU is, per stream ("usage", "predictions", "reqstats"), the CPU
	// time the tight writer and the consumer spent per row, ClickHouse's
	// and this process's: a figure the load of a shared machine moves far
	// less than rows per second.
	CPU map[string]CPUFigures `json:"cpu"`
	// BurstPublishRowsPerS is how fast the agents published in the burst
	// phase, with the consumer running beside them.
	BurstPublishRowsPerS float64 `json:"burst_publish_rows_per_s"`
	Rows                 int     `json:"rows"`
	Batches              int     `json:"batches"`
	Nodes                int     `json:"nodes"`
	GPUs                 int     `json:"gpus"`
	Allocations          int     `json:"allocations"`
	SimSeconds           int     `json:"sim_seconds"`
	DrainSeconds         int     `json:"drain_seconds"`
	RealtimeSeconds      int     `json:"realtime_seconds"`
	Seconds              float64 `json:"seconds"`
	GOMAXPROCS           int     `json:"gomaxprocs"`
	// LoadAvg is the one-minute load average at the start and at the end:
	// the machine may be shared.
	LoadAvg    [2]float64      `json:"load_avg"`
	TargetsMet map[string]bool `json:"targets_met"`
}

// The usage fleet: 250 nodes of 8 GPUs, every GPU split into seven MIG
// 1g.10gb slices, so 14,000 allocations, each reporting every second.
const (
	usageNodes   = 250
	gpusPerNode  = 8
	slicesPerGPU = 7
	burstSeconds = 60
	paceSeconds  = 10
	drainSeconds = 60
	// The fleet's seconds: the drain's first, then the burst's, then the
	// real pace's.
	burstFrom = drainSeconds
	paceFrom  = burstFrom + burstSeconds
	// maxInFlight bounds each agent's unacknowledged publishes: 250
	// agents × 16 × 16 KB stays under the 128 MiB a stream queues before
	// JetStream answers 429.
	maxInFlight = 16
)

// The phases whose lags the consumer records.
const (
	burstPhase = iota
	pacePhase
	drainPhase
)

func runIngest(ctx context.Context, cfg Config, out io.Writer) error {
	res, err := measureIngest(ctx, cfg)
	if err != nil {
		return err
	}
	return emit(out, cfg.JSON, res, "ingest: usage %.0f rows/s end to end (%.2fx the raw publish rate of %.0f rows/s), lag p50 %.2f s, p99 %.2f s (at real pace p99 %.2f s); %d rows from %d allocations over %d simulated seconds; "+
		"usage drain %.0f rows/s (%.2fx ClickHouse's %.0f); predictions %.0f rows/s (%.2fx ClickHouse's %.0f); request statistics %.0f rows/s (%.2fx ClickHouse's %.0f)\n",
		res.RowsPerS, res.VsRawPublish, res.RawPublishRowsPerS, res.LagP50S, res.LagP99S, res.RealtimeLagP99S, res.Rows, res.Allocations, res.SimSeconds,
		res.UsageDrainRowsPerS, res.UsageVsClickHouse, res.ClickHouseRowsPerS, res.PredictionRowsPerS, res.PredictionsVsClickHouse, res.PredictionClickHouseRowsPerS, res.ReqStatsRowsPerS, res.ReqStatsVsClickHouse, res.ReqStatsClickHouseRowsPerS)
}

// measureIngest starts PostgreSQL (rates), ClickHouse and an embedded NATS
// with file storage, all private to the run. 250 agents, one NATS
// connection each, publish their node's records with async JetStream
// publishes. First 60 simulated seconds go into MP_USAGE before the
// consumer starts, and it is timed draining them beside the tight writer
// (usageDrain). Then the next 60 seconds, as fast as the agents can, first
// into a scratch stream nobody reads (the raw publish rate) and then into
// MP_USAGE while the consumer runs beside them (the burst); then 10 more
// seconds at the real pace of one batch per agent per second. The small
// streams follow (smallStreams). The batches are encoded beforehand so that every phase
// times the pipeline, not the generator. The run fails unless ClickHouse
// ends with exactly the rows published.
func measureIngest(ctx context.Context, cfg Config) (IngestResult, error) {
	load := load1()
	s, err := newScratch("mp-bench-ingest-")
	if err != nil {
		return IngestResult{}, err
	}
	defer s.close()
	pool, err := s.postgres(ctx)
	if err != nil {
		return IngestResult{}, err
	}
	ch, err := s.clickhouse(ctx)
	if err != nil {
		return IngestResult{}, err
	}
	ceiling, err := s.clickhouseDB(ctx, "ceiling")
	if err != nil {
		return IngestResult{}, err
	}
	url, js, err := s.nats(ctx)
	if err != nil {
		return IngestResult{}, err
	}
	if err := recordAllocations(ctx, db.New(pool)); err != nil {
		return IngestResult{}, err
	}
	fleet := newUsageFleet(drainSeconds + burstSeconds + paceSeconds)
	fleet.natsOpts = s.natsOpts()
	burst := fleet.rows(burstFrom, paceFrom)
	res := IngestResult{Name: "ingest", Rows: burst, Batches: usageNodes * burstSeconds, Nodes: usageNodes, GPUs: usageNodes * gpusPerNode,
		Allocations: usageNodes * gpusPerNode * slicesPerGPU, SimSeconds: burstSeconds, RealtimeSeconds: paceSeconds, DrainSeconds: drainSeconds,
		GOMAXPROCS: runtime.GOMAXPROCS(0), CPU: map[string]CPUFigures{}, LoadAvg: [2]float64{load}}
	t0 := time.Now()
	lags := newLagTracker(fleet)
	u, err := newUsage(s, js, ch, pool, lags, cfg.Profile)
	if err != nil {
		return res, err
	}
	w := tightWriter{ch: ceiling, cpu: procClock{clickhouse: s.ch.PID()}}
	if err := usageDrain(ctx, w, u, js, url, fleet, lags, pool, &res); err != nil {
		return res, err
	}
	if res.RawPublishRowsPerS, err = rawPublishRate(ctx, js, url, fleet); err != nil {
		return res, err
	}
	elapsed, err := publishPhases(ctx, url, fleet, lags, &res)
	if err != nil {
		return res, err
	}
	res.Seconds = elapsed.Seconds()
	res.RowsPerS = float64(burst) / elapsed.Seconds()
	res.VsRawPublish = res.RowsPerS / res.RawPublishRowsPerS
	lags.mu.Lock()
	res.LagP50S = quantile(lags.lags[burstPhase], 0.50).Seconds()
	res.LagP99S = quantile(lags.lags[burstPhase], 0.99).Seconds()
	res.RealtimeLagP99S = quantile(lags.lags[pacePhase], 0.99).Seconds()
	lags.mu.Unlock()
	var count uint64
	if err := ch.QueryRow(ctx, "SELECT count() FROM gpu_usage").Scan(&count); err != nil {
		return res, err
	}
	if all := fleet.rows(0, fleet.seconds); count != uint64(all) {
		return res, fmt.Errorf("gpu_usage holds %d rows, %d were published", count, all)
	}
	fleet.batches = nil // sent: no span after this pays to collect them
	if err := smallStreams(ctx, s, w, js, ch, url, t0, &res); err != nil {
		return res, err
	}
	res.LoadAvg[1] = load1()
	res.TargetsMet = map[string]bool{
		"rows_per_s_at_least_100000":     res.RowsPerS >= 100_000,
		"at_least_half_raw_publish_rate": res.VsRawPublish >= 0.5,
		"lag_p99_under_5s":               res.LagP99S < 5,
		"usage_at_least_0.8_clickhouse":  res.UsageVsClickHouse >= 0.8,
	}
	return res, nil
}

// usageDrain publishes the drain's seconds into MP_USAGE and times the
// consumer, started then, storing them beside the tight writer sending
// the same rows: a consumer catching up a backlog, as the small streams'
// are timed. The consumer runs on after. Then the same messages are taken
// again by a consumer that only acknowledges them (transportFloor), for the
// bound JetStream's own work puts on the consumer's CPU ratio.
func usageDrain(ctx context.Context, w tightWriter, u *ingest.Usage, js jetstream.JetStream, url string, fleet *usageFleet, lags *lagTracker, pool *pgxpool.Pool, res *IngestResult) error {
	from, to := 0, drainSeconds
	if _, err := fleet.publish(ctx, url, busapi.UsageSubject, from, to, 0, lags.stamp); err != nil {
		return fmt.Errorf("publish: %w", err)
	}
	prices, err := billing.LoadRates(ctx, db.New(pool))
	if err != nil {
		return err
	}
	cols := func() ([]any, error) { return usageCeilingColumns(fleet, prices, from, to) }
	rows := fleet.rows(from, to)
	c, err := w.compare(ctx, ingest.UsageInsert, cols, rows, func() (time.Duration, error) {
		start := time.Now()
		if err := u.Start(ctx); err != nil {
			return 0, err
		}
		if err := lags.wait(ctx, drainPhase); err != nil {
			return 0, err
		}
		lags.mu.Lock()
		defer lags.mu.Unlock()
		return lags.lastDone[drainPhase].Sub(start), nil
	})
	if err != nil {
		return fmt.Errorf("usage: %w", err)
	}
	res.UsageDrainRowsPerS, res.ClickHouseRowsPerS, res.UsageVsClickHouse = c.IngestRowsPerS, c.CeilingRowsPerS, c.RowsPerSRatio
	transport, err := transportFloor(ctx, js, busapi.StreamUsage, usageNodes*(to-from), rows, w.cpu)
	if err != nil {
		return err
	}
	c.bound(transport)
	res.CPU["usage"] = c.CPUFigures
	return nil
}

// rawPublishRate publishes the burst into a scratch stream with
// MP_USAGE's settings that nothing consumes, and returns the rows per
// second: JetStream's own ceiling on this machine.
func rawPublishRate(ctx context.Context, js jetstream.JetStream, url string, fleet *usageFleet) (float64, error) {
	const scratch = "BENCH_RAW"
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: scratch, Subjects: []string{"bench.raw.>"}, Storage: jetstream.FileStorage,
		Duplicates: 2 * time.Minute}); err != nil {
		return 0, fmt.Errorf("scratch stream: %w", err)
	}
	raw, err := fleet.publish(ctx, url, func(node string) string { return "bench.raw." + node }, burstFrom, paceFrom, 0, nil)
	if err != nil {
		return 0, fmt.Errorf("raw publish: %w", err)
	}
	rate := float64(fleet.rows(burstFrom, paceFrom)) / raw.Seconds()
	return rate, js.DeleteStream(ctx, scratch)
}

// newUsage builds the ingest consumer, which reports every insert to
// lags, and starts the CPU profile (profile, when set); both stop with s.
func newUsage(s *scratch, js jetstream.JetStream, ch driver.Conn, pool *pgxpool.Pool, lags *lagTracker, profile string) (*ingest.Usage, error) {
	u, err := ingest.NewUsage(ingest.UsageConfig{
		JS: js, CH: ch, Log: slog.New(slog.DiscardHandler),
		LoadRates:       func(ctx context.Context) (ingest.Pricer, error) { return billing.LoadRates(ctx, db.New(pool)) },
		LoadAllocations: billing.LoadAllocations(db.New(pool)),
		AfterInsert:     lags.inserted,
	})
	if err != nil {
		return nil, err
	}
	if err := s.profile(profile); err != nil {
		return nil, err
	}
	s.onClose(u.Stop)
	return u, nil
}

// publishPhases publishes the burst and then the real pace into MP_USAGE,
// waiting after each until the consumer stored every batch, and returns
// the burst's time from its first publish to its last insert.
func publishPhases(ctx context.Context, url string, fleet *usageFleet, lags *lagTracker, res *IngestResult) (time.Duration, error) {
	start := time.Now()
	pub, err := fleet.publish(ctx, url, busapi.UsageSubject, burstFrom, paceFrom, 0, lags.stamp)
	if err != nil {
		return 0, fmt.Errorf("publish: %w", err)
	}
	res.BurstPublishRowsPerS = float64(res.Rows) / pub.Seconds()
	if err := lags.wait(ctx, burstPhase); err != nil {
		return 0, err
	}
	lags.mu.Lock()
	elapsed := lags.lastDone[burstPhase].Sub(start)
	lags.mu.Unlock()
	if _, err := fleet.publish(ctx, url, busapi.UsageSubject, paceFrom, paceFrom+paceSeconds, time.Second, lags.stamp); err != nil {
		return 0, fmt.Errorf("publish: %w", err)
	}
	return elapsed, lags.wait(ctx, pacePhase)
}

// lagTracker times each batch from its publish call to the insert that
// stored it, by phase, and says when a phase's batches are all stored.
type lagTracker struct {
	fleet     *usageFleet
	published []atomic.Int64 // publish call, Unix ns, by batch index

	mu       sync.Mutex
	lags     [3][]time.Duration
	lastDone [3]time.Time
	done     [3]chan struct{}
	want     [3]int
}

func newLagTracker(fleet *usageFleet) *lagTracker {
	return &lagTracker{fleet: fleet, published: make([]atomic.Int64, len(fleet.ids)),
		done: [3]chan struct{}{make(chan struct{}), make(chan struct{}), make(chan struct{})},
		want: [3]int{usageNodes * burstSeconds, usageNodes * paceSeconds, usageNodes * drainSeconds}}
}

// stamp records batch i's publish call.
func (t *lagTracker) stamp(i int) { t.published[i].Store(time.Now().UnixNano()) }

// inserted is the consumer's AfterInsert: ids were just stored.
func (t *lagTracker) inserted(ids []string) error {
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, id := range ids {
		i := t.fleet.index[id]
		phase := burstPhase
		switch sec := t.fleet.second(i); {
		case sec < burstFrom:
			phase = drainPhase
		case sec >= paceFrom:
			phase = pacePhase
		}
		t.lags[phase] = append(t.lags[phase], now.Sub(time.Unix(0, t.published[i].Load())))
		if len(t.lags[phase]) == t.want[phase] {
			t.lastDone[phase] = now
			close(t.done[phase])
		}
	}
	return nil
}

// wait returns once every batch of phase is stored, or fails after five
// minutes.
func (t *lagTracker) wait(ctx context.Context, phase int) error {
	select {
	case <-t.done[phase]:
		return nil
	case <-time.After(5 * time.Minute):
		return fmt.Errorf("ingest: batches still missing after 5 minutes (phase %d)", phase)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// usageFleet is every batch of the run, encoded, by node and second.
type usageFleet struct {
	// natsOpts connect each node's publisher (the scratch NATS's
	// credential: the raw baseline publishes off the contract's subjects).
	natsOpts []nats.Option
	nodes    []string
	seconds  int
	batches  [][][]byte // node → second → JSON
	ids      []string   // batch index (node-major) → id
	index    map[string]int
	records  int // per batch
}

func (f *usageFleet) rows(from, to int) int { return len(f.nodes) * (to - from) * f.records }

func (f *usageFleet) second(i int) int { return i % f.seconds }

// newUsageFleet encodes every batch of seconds seconds, the first one
// paceFrom seconds ago.
func newUsageFleet(seconds int) *usageFleet {
	f := &usageFleet{seconds: seconds, index: make(map[string]int), records: gpusPerNode * slicesPerGPU}
	t0 := time.Now().Add(-time.Duration(paceFrom) * time.Second).Unix()
	for n := range usageNodes {
		node := fmt.Sprintf("gpu-node-%03d", n)
		f.nodes = append(f.nodes, node)
		perNode := make([][]byte, seconds)
		for s := range seconds {
			t := t0 + int64(s)
			b := busapi.UsageBatch{ID: fmt.Sprintf("%s/%d/0", node, t), Node: node, Records: make([]busapi.Usage, 0, f.records)}
			for g := range gpusPerNode {
				for sl := range slicesPerGPU {
					a := slotAllocation(n, g, sl)
					b.Records = append(b.Records, busapi.Usage{Time: t, Node: node, GPU: g, Slice: sl, GPUType: a.GPUType, Profile: a.Profile,
						Team: a.Team, Endpoint: a.Endpoint, Model: a.Model, Version: a.Version,
						Replica: a.Replica, UtilPct: float64((s*7+g*13+sl*3)%100) + 0.5,
						MemoryMB: int64(4000 + (s*11+sl)%6000), Requests: int64((s*31 + g*7 + sl) % 40)})
				}
			}
			perNode[s] = busapi.AppendUsageBatch(nil, &b)
			f.index[b.ID] = len(f.ids)
			f.ids = append(f.ids, b.ID)
		}
		f.batches = append(f.batches, perNode)
	}
	return f
}

// slotAllocation is who holds slice sl of GPU g of node n: one replica per
// slice, of 1,000 endpoints of 50 teams, alternate nodes A100s and H100s.
func slotAllocation(n, g, sl int) ingest.Allocation {
	gpuType := "A100-80GB"
	if n%2 == 1 {
		gpuType = "H100-80GB"
	}
	node := fmt.Sprintf("gpu-node-%03d", n)
	ep := (n*gpusPerNode*slicesPerGPU + g*slicesPerGPU + sl) % 1000
	return ingest.Allocation{Node: node, GPU: g, Slice: sl, GPUType: gpuType, Profile: "mig-1g.10gb",
		Team: fmt.Sprintf("team-%d", ep%50), Endpoint: fmt.Sprintf("endpoint-%d", ep), Model: fmt.Sprintf("model-%d", ep), Version: "v10",
		Replica: fmt.Sprintf("endpoint-%d-%s-%d-%d", ep, node, g, sl)}
}

// recordAllocations writes every slot's allocation interval, from an hour
// before the first second, as placement would have: the consumer
// attributes every row by them.
func recordAllocations(ctx context.Context, q *db.Queries) error {
	from := time.Now().Add(-time.Duration(paceFrom)*time.Second - time.Hour)
	var all []ingest.Allocation
	for n := range usageNodes {
		for g := range gpusPerNode {
			for sl := range slicesPerGPU {
				a := slotAllocation(n, g, sl)
				a.From = from
				all = append(all, a)
			}
		}
	}
	return billing.RecordAllocations(ctx, q, all)
}

// publish runs one agent per node, each with its own NATS connection,
// publishing its node's batches for seconds [from, to) with async
// publishes, one every pace (0: as fast as it can), and returns the time
// from the first publish to the last acknowledgement. onPublish, when set,
// is called with a batch's index just before its publish.
func (f *usageFleet) publish(ctx context.Context, url string, subject func(node string) string, from, to int, pace time.Duration, onPublish func(i int)) (time.Duration, error) {
	conns := make([]jetstream.JetStream, len(f.nodes))
	for i := range conns {
		nc, err := nats.Connect(url, f.natsOpts...)
		if err != nil {
			return 0, err
		}
		defer nc.Close()
		if conns[i], err = jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(maxInFlight)); err != nil {
			return 0, err
		}
	}
	var (
		wg      sync.WaitGroup
		errOnce sync.Once
		first   error
	)
	fail := func(err error) { errOnce.Do(func() { first = err }) }
	start := time.Now()
	for n, node := range f.nodes {
		wg.Go(func() {
			js := conns[n]
			subj := subject(node)
			futures := make([]jetstream.PubAckFuture, 0, to-from)
			for s := from; s < to; s++ {
				if pace > 0 {
					select {
					case <-time.After(time.Until(start.Add(time.Duration(s-from) * pace))):
					case <-ctx.Done():
						fail(ctx.Err())
						return
					}
				}
				i := n*f.seconds + s
				if onPublish != nil {
					onPublish(i)
				}
				fut, err := js.PublishAsync(subj, f.batches[n][s], jetstream.WithMsgID(f.ids[i]), jetstream.WithStallWait(time.Minute))
				if err != nil {
					fail(err)
					return
				}
				futures = append(futures, fut)
			}
			for _, fut := range futures {
				select {
				case <-fut.Ok():
				case err := <-fut.Err():
					fail(err)
					return
				case <-ctx.Done():
					fail(ctx.Err())
					return
				}
			}
		})
	}
	wg.Wait()
	return time.Since(start), first
}
