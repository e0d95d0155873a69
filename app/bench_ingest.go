package app

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"modelplane/agent/proto"
	"modelplane/billing"
	"modelplane/bus"
	"modelplane/db"
	"modelplane/ingest"
	"modelplane/internal/chproc"
	"modelplane/internal/pgproc"
	"modelplane/migrations"
)

// IngestBenchResult is what `modelplane bench ingest` prints.
type IngestBenchResult struct {
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
	// BurstPublishRowsPerS is how fast the agents published in the burst
	// phase, with the consumer running beside them.
	BurstPublishRowsPerS float64         `json:"burst_publish_rows_per_s"`
	Rows                 int             `json:"rows"`
	Batches              int             `json:"batches"`
	Nodes                int             `json:"nodes"`
	GPUs                 int             `json:"gpus"`
	Allocations          int             `json:"allocations"`
	SimSeconds           int             `json:"sim_seconds"`
	RealtimeSeconds      int             `json:"realtime_seconds"`
	Seconds              float64         `json:"seconds"`
	GOMAXPROCS           int             `json:"gomaxprocs"`
	TargetsMet           map[string]bool `json:"targets_met"`
}

// The bench fleet: 250 nodes of 8 GPUs, every GPU split into seven MIG
// 1g.10gb slices, so 14,000 allocations, each reporting every second.
const (
	benchNodes       = 250
	benchGPUsPerNode = 8
	benchSlices      = 7
	benchSimSeconds  = 60
	benchRealtime    = 10
	// benchMaxInFlight bounds each agent's unacknowledged publishes: 250
	// agents × 16 × 16 KB stays under the 128 MiB a stream queues before
	// JetStream answers 429.
	benchMaxInFlight = 16
)

func runBenchIngest(ctx context.Context, cfg BenchConfig, out io.Writer) error {
	res, err := benchIngest(ctx, cfg)
	if err != nil {
		return err
	}
	if cfg.JSON {
		return json.NewEncoder(out).Encode(res)
	}
	_, err = fmt.Fprintf(out, "ingest: %.0f rows/s end to end (%.2fx the raw publish rate of %.0f rows/s), lag p50 %.2f s, p99 %.2f s (at real pace p99 %.2f s); %d rows from %d allocations over %d simulated seconds\n",
		res.RowsPerS, res.VsRawPublish, res.RawPublishRowsPerS, res.LagP50S, res.LagP99S, res.RealtimeLagP99S, res.Rows, res.Allocations, res.SimSeconds)
	return err
}

// benchIngest starts PostgreSQL (rates), ClickHouse and an embedded NATS
// with file storage, all private to the run. 250 agents, one NATS
// connection each, publish their node's records with async JetStream
// publishes: 60 simulated seconds as fast as they can, first into a scratch
// stream nobody reads (the raw publish rate) and then into MP_USAGE while
// the ingest consumer runs beside them (the burst); then 10 more seconds at
// the real pace of one batch per agent per second. The batches are encoded
// beforehand so that every phase times the pipeline, not the generator.
// The run fails unless ClickHouse ends with exactly the rows published.
func benchIngest(ctx context.Context, cfg BenchConfig) (IngestBenchResult, error) {
	dir, err := os.MkdirTemp("", "mp-bench-ingest-")
	if err != nil {
		return IngestBenchResult{}, err
	}
	defer os.RemoveAll(dir)
	_ = os.Chmod(dir, 0o755)
	pg, err := pgproc.Start(ctx, filepath.Join(dir, "pg"))
	if err != nil {
		return IngestBenchResult{}, err
	}
	defer pg.Stop()
	pool, err := db.Open(ctx, pg.URL("postgres"))
	if err != nil {
		return IngestBenchResult{}, err
	}
	defer pool.Close()
	if err := migrations.Postgres(ctx, pool); err != nil {
		return IngestBenchResult{}, err
	}
	chs, err := chproc.Start(ctx, filepath.Join(dir, "clickhouse"))
	if err != nil {
		return IngestBenchResult{}, err
	}
	defer chs.Stop()
	ch, err := ingest.OpenClickHouse(ctx, chs.URL("bench"))
	if err != nil {
		return IngestBenchResult{}, err
	}
	defer ch.Close()
	if err := migrations.ClickHouse(ctx, ch); err != nil {
		return IngestBenchResult{}, err
	}
	ns, err := bus.StartEmbedded(filepath.Join(dir, "nats"))
	if err != nil {
		return IngestBenchResult{}, err
	}
	defer ns.Shutdown()
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		return IngestBenchResult{}, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return IngestBenchResult{}, err
	}
	if err := bus.Ensure(ctx, js); err != nil {
		return IngestBenchResult{}, err
	}

	fleet := benchFleet(benchSimSeconds + benchRealtime)
	burst := fleet.rows(0, benchSimSeconds)
	res := IngestBenchResult{Name: "ingest", Rows: burst, Batches: benchNodes * benchSimSeconds, Nodes: benchNodes, GPUs: benchNodes * benchGPUsPerNode,
		Allocations: benchNodes * benchGPUsPerNode * benchSlices, SimSeconds: benchSimSeconds, RealtimeSeconds: benchRealtime,
		GOMAXPROCS: runtime.GOMAXPROCS(0)}

	// Raw publish into a scratch stream with MP_USAGE's settings.
	const scratch = "BENCH_RAW"
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: scratch, Subjects: []string{"bench.raw.>"}, Storage: jetstream.FileStorage,
		Duplicates: 2 * time.Minute}); err != nil {
		return res, fmt.Errorf("scratch stream: %w", err)
	}
	raw, err := fleet.publish(ctx, ns.ClientURL(), func(node string) string { return "bench.raw." + node }, 0, benchSimSeconds, 0, nil)
	if err != nil {
		return res, fmt.Errorf("raw publish: %w", err)
	}
	res.RawPublishRowsPerS = float64(burst) / raw.Seconds()
	if err := js.DeleteStream(ctx, scratch); err != nil {
		return res, err
	}

	// The consumer, timing each batch from its publish to its insert.
	n := len(fleet.ids)
	published := make([]atomic.Int64, n) // publish call, Unix ns
	stamp := func(i int) { published[i].Store(time.Now().UnixNano()) }
	var (
		mu       sync.Mutex
		lags     [2][]time.Duration // burst, real pace
		lastDone [2]time.Time
		done     = [2]chan struct{}{make(chan struct{}), make(chan struct{})}
		want     = [2]int{benchNodes * benchSimSeconds, benchNodes * benchRealtime}
	)
	u, err := ingest.NewUsage(ingest.UsageConfig{
		JS: js, CH: ch, Log: slog.New(slog.DiscardHandler),
		LoadRates: func(ctx context.Context) (ingest.Pricer, error) { return billing.LoadRates(ctx, db.New(pool)) },
		AfterInsert: func(ids []string) error {
			now := time.Now()
			mu.Lock()
			defer mu.Unlock()
			for _, id := range ids {
				i := fleet.index[id]
				phase := 0
				if fleet.second(i) >= benchSimSeconds {
					phase = 1
				}
				lags[phase] = append(lags[phase], now.Sub(time.Unix(0, published[i].Load())))
				if len(lags[phase]) == want[phase] {
					lastDone[phase] = now
					close(done[phase])
				}
			}
			return nil
		},
	})
	if err != nil {
		return res, err
	}
	if cfg.Profile != "" {
		f, err := os.Create(cfg.Profile)
		if err != nil {
			return res, err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return res, err
		}
		defer pprof.StopCPUProfile()
	}
	if err := u.Start(ctx); err != nil {
		return res, err
	}
	defer u.Stop()
	wait := func(phase int) error {
		select {
		case <-done[phase]:
			return nil
		case <-time.After(5 * time.Minute):
			return fmt.Errorf("ingest: batches still missing after 5 minutes (phase %d)", phase)
		case <-ctx.Done():
			return ctx.Err()
		}
	}

	// The burst.
	start := time.Now()
	pub, err := fleet.publish(ctx, ns.ClientURL(), proto.UsageSubject, 0, benchSimSeconds, 0, stamp)
	if err != nil {
		return res, fmt.Errorf("publish: %w", err)
	}
	res.BurstPublishRowsPerS = float64(burst) / pub.Seconds()
	if err := wait(0); err != nil {
		return res, err
	}
	mu.Lock()
	elapsed := lastDone[0].Sub(start)
	mu.Unlock()

	// The real pace.
	if _, err := fleet.publish(ctx, ns.ClientURL(), proto.UsageSubject, benchSimSeconds, benchSimSeconds+benchRealtime, time.Second, stamp); err != nil {
		return res, fmt.Errorf("publish: %w", err)
	}
	if err := wait(1); err != nil {
		return res, err
	}

	var count uint64
	if err := ch.QueryRow(ctx, "SELECT count() FROM gpu_usage").Scan(&count); err != nil {
		return res, err
	}
	if all := fleet.rows(0, benchSimSeconds+benchRealtime); count != uint64(all) {
		return res, fmt.Errorf("gpu_usage holds %d rows, %d were published", count, all)
	}
	res.Seconds = elapsed.Seconds()
	res.RowsPerS = float64(burst) / elapsed.Seconds()
	res.VsRawPublish = res.RowsPerS / res.RawPublishRowsPerS
	mu.Lock()
	res.LagP50S = quantile(lags[0], 0.50).Seconds()
	res.LagP99S = quantile(lags[0], 0.99).Seconds()
	res.RealtimeLagP99S = quantile(lags[1], 0.99).Seconds()
	mu.Unlock()
	res.TargetsMet = map[string]bool{
		"rows_per_s_at_least_100000":     res.RowsPerS >= 100_000,
		"at_least_half_raw_publish_rate": res.VsRawPublish >= 0.5,
		"lag_p99_under_5s":               res.LagP99S < 5,
	}
	return res, nil
}

// quantile sorts d and returns its q-quantile.
func quantile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	return d[int(q*float64(len(d)-1))]
}

// benchFleetData is every batch of the run, encoded, by node and second.
type benchFleetData struct {
	nodes   []string
	seconds int
	batches [][][]byte // node → second → JSON
	ids     []string   // batch index (node-major) → id
	index   map[string]int
	records int // per batch
}

func (f *benchFleetData) rows(from, to int) int { return len(f.nodes) * (to - from) * f.records }

func (f *benchFleetData) second(i int) int { return i % f.seconds }

func benchFleet(seconds int) *benchFleetData {
	f := &benchFleetData{seconds: seconds, index: make(map[string]int), records: benchGPUsPerNode * benchSlices}
	t0 := time.Now().Add(-time.Duration(benchSimSeconds) * time.Second).Unix()
	for n := range benchNodes {
		node := fmt.Sprintf("gpu-node-%03d", n)
		gpuType := "A100-80GB"
		if n%2 == 1 {
			gpuType = "H100-80GB"
		}
		f.nodes = append(f.nodes, node)
		perNode := make([][]byte, seconds)
		for s := range seconds {
			t := t0 + int64(s)
			b := proto.UsageBatch{ID: fmt.Sprintf("%s/%d/0", node, t), Node: node, Records: make([]proto.Usage, 0, f.records)}
			for g := range benchGPUsPerNode {
				for sl := range benchSlices {
					ep := (n*benchGPUsPerNode*benchSlices + g*benchSlices + sl) % 1000
					b.Records = append(b.Records, proto.Usage{Time: t, Node: node, GPU: g, Slice: sl, GPUType: gpuType, Profile: "mig-1g.10gb",
						Team: fmt.Sprintf("team-%d", ep%50), Endpoint: fmt.Sprintf("endpoint-%d", ep), Model: fmt.Sprintf("model-%d", ep), Version: "v10",
						Replica: fmt.Sprintf("endpoint-%d-%s-%d-%d", ep, node, g, sl), UtilPct: float64((s*7+g*13+sl*3)%100) + 0.5,
						MemoryMB: int64(4000 + (s*11+sl)%6000), Requests: int64((s*31 + g*7 + sl) % 40)})
				}
			}
			data, err := json.Marshal(b)
			if err != nil {
				panic(err) // plain structs always encode
			}
			perNode[s] = data
			f.index[b.ID] = len(f.ids)
			f.ids = append(f.ids, b.ID)
		}
		f.batches = append(f.batches, perNode)
	}
	return f
}

// publish runs one agent per node, each with its own NATS connection,
// publishing its node's batches for seconds [from, to) with async
// publishes, one every pace (0: as fast as it can), and returns the time
// from the first publish to the last acknowledgement. onPublish, when set,
// is called with a batch's index just before its publish.
func (f *benchFleetData) publish(ctx context.Context, url string, subject func(node string) string, from, to int, pace time.Duration, onPublish func(i int)) (time.Duration, error) {
	conns := make([]jetstream.JetStream, len(f.nodes))
	for i := range conns {
		nc, err := nats.Connect(url)
		if err != nil {
			return 0, err
		}
		defer nc.Close()
		if conns[i], err = jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(benchMaxInFlight)); err != nil {
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
