package ingest

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/coder/quartz"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"modelplane/busapi"
)

// Pricer gives the rate in force for one second of one GPU allocation, in
// micro-USD per hour; *billing.Rates is one.
type Pricer interface {
	At(gpuType, profile string, t time.Time) (uusdPerHour int64, ok bool)
}

// UsageConfig configures the usage consumer. JS, CH, LoadRates and
// LoadAllocations are required; a zero value of any other field takes the default its comment
// names.
type UsageConfig struct {
	JS jetstream.JetStream
	CH driver.Conn
	// LoadRates reads the rate table. It is called before the first message
	// is consumed (nothing is consumed until it succeeds, so no second is
	// ever priced without a table) and then every RateRefresh.
	LoadRates func(ctx context.Context) (Pricer, error)
	// LoadAllocations reads the control plane's allocation intervals, by
	// which every second is attributed (billing.LoadAllocations). A
	// record's team, endpoint, model, version, GPU type and profile come
	// from its interval, never from the agent; a record no interval of its
	// replica covers is dropped and counted.
	LoadAllocations LoadAllocations
	// AllocationHorizon is how long an ended interval is kept in memory;
	// default DefaultAllocationHorizon. Usage older than that is dropped
	// as unallocated.
	AllocationHorizon time.Duration
	Log               *slog.Logger
	// Metrics, when set, gets the consumer's counters and lag gauge.
	Metrics prometheus.Registerer
	// Clock is what lag and the allocation horizon are measured with, and
	// what the rollup repair loop ticks on; default quartz.NewReal().
	// Flush and retry waits are wall-clock time: they time real I/O.
	Clock quartz.Clock

	// Stream is the stream consumed; default busapi.StreamUsage. Its
	// subjects must be busapi.UsageSubject's: the node a batch bills is
	// checked against its subject, and a message on any other subject is
	// terminated as poison.
	Stream string
	// Durable names the durable consumer; default "ingest-usage".
	Durable string
	// Workers is the number of parallel inserts; default GOMAXPROCS, at
	// least 2 and at most 4. A worker decodes its messages itself, so it
	// keeps a core busy; on 2 cores a third one only took CPU from
	// ClickHouse (modelplane bench ingest). Each node's batches always go to
	// the same worker.
	Workers int
	// BatchRows is the most rows a worker gathers before it inserts;
	// default 200,000, the tight writer's block in `modelplane bench
	// ingest`. ClickHouse wants few large inserts: each insert is a part
	// on disk, and the hourly and daily rollups' views write a row per
	// slot and hour or day of every insert, so a backlog stored in inserts
	// of 40,000 rows cost ClickHouse three times the CPU a row that
	// inserts of 200,000 did.
	BatchRows int
	// FlushInterval bounds how long a worker holds a message before it
	// inserts what it has, unless its last insert is still under way
	// (then it gathers on until that one ends); default 500ms: at the
	// fleet's real pace that is a couple of inserts a second per worker,
	// near ClickHouse's advice of about one, while keeping lag well under
	// a second of it.
	FlushInterval time.Duration
	// PrefetchBytes bounds the message bytes pulled ahead of the workers;
	// default 16 MiB. It is counted in bytes, not messages, because the
	// client drops messages (and the server redelivers them only after
	// AckWait) once a subscription buffers more than 64 MiB, and batches
	// vary in size with the agents' chunking.
	PrefetchBytes int
	// MaxAckPending is the consumer's limit on delivered, unacknowledged
	// messages; default 20,000. It must exceed what is prefetched plus what
	// the workers hold, or pulling stalls until they flush.
	MaxAckPending int
	// AckWait is how long the server waits for an ack before it redelivers;
	// default 1 minute, above Timeout so a slow insert is not redelivered
	// while it is still running.
	AckWait time.Duration
	// MaxDeliver bounds deliveries of one message; default 2,000. Failed
	// inserts are retried by redelivery with a delay growing to MaxNakDelay,
	// so the default rides out about 16 hours of ClickHouse outage. A message
	// past it stays in the stream and can be replayed: replays are skipped
	// where already stored.
	MaxDeliver int
	// NakDelay is the redelivery delay after the first failed insert,
	// doubling with each delivery up to MaxNakDelay; defaults 1s and 30s.
	NakDelay    time.Duration
	MaxNakDelay time.Duration
	// RateRefresh is how often the rate table is reloaded; default 1 minute.
	RateRefresh time.Duration
	// Timeout bounds each ClickHouse call; default 30s.
	Timeout time.Duration
	// RepairInterval is how often, at most, the hourly rollup is repaired
	// while a repair is pending (see RepairRollup), apart from one early
	// retry of a repair that failed with ClickHouse; default 30s. A repair
	// is pending after an insert failed, for the hours it tried to write,
	// and at Start, for the last RepairWindow.
	RepairInterval time.Duration
	// AfterInsert, when set, is called after ClickHouse accepted an insert
	// and before the messages are acked, with the ids of the batches whose
	// rows that insert stored. Benchmarks time batches with it; tests return
	// an error from it to abandon the messages unacked, as a process killed
	// at that point would.
	AfterInsert func(batchIDs []string) error
}

// Usage consumes MP_USAGE into ClickHouse gpu_usage exactly once; see the
// package comment for how.
type Usage struct {
	cfg   UsageConfig
	log   *slog.Logger
	stats usageCounters

	rates  atomic.Value // rateTable
	warned sync.Map     // "type/profile" → struct{}: unpriced, logged once

	allocs *allocCache
	known  ledgerMemory

	db     atomic.Pointer[string] // ClickHouse database, once known; tags inserts
	repair rollupPending

	mu  sync.Mutex
	run *usageRun // nil while stopped
}

// usageRun is one Start-to-Stop run of the consumer.
type usageRun struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

type rateTable struct{ Pricer }

// usageCounters are the consumer's running totals.
type usageCounters struct {
	rows, dupRows, repeated, lookedUp, batches, dupBatches, poison, unpriced, insertFailures atomic.Uint64
	rollupRepairs, rollupKeys                                                                atomic.Uint64
	dropped                                                                                  [dropReasons]atomic.Uint64
	lagNanos                                                                                 atomic.Int64
}

// UsageStats is a snapshot of the consumer's counters since it was built.
type UsageStats struct {
	// Rows is the number of rows inserted into gpu_usage.
	Rows uint64
	// DuplicateRows is the number of rows skipped because they were already
	// stored from their own batch: redeliveries and replays.
	DuplicateRows uint64
	// RepeatedRows is the number of rows dropped, never billed, because
	// gpu_usage already held a row of their slot-second (node, GPU and
	// slice or core, replica, second) from another batch, or another row
	// gathered with them had it: a node billing one second twice.
	RepeatedRows uint64
	// LookedUpRows is the number of rows whose slot-second was looked up
	// in gpu_usage because the consumer's memory of its run could not
	// rule out that it was stored (ledgerMemory): rows of redelivered
	// messages, late rows, and rows older than the window read at Start.
	// Live rows need no lookup.
	LookedUpRows uint64
	// Batches is the number of messages acked after their rows were stored.
	Batches uint64
	// DuplicateBatches is the number of messages none of whose rows needed
	// inserting (stored already, or repeats).
	DuplicateBatches uint64
	// Poison is the number of messages terminated because they do not
	// decode or do not describe the node they were published for.
	Poison uint64
	// UnpricedRows is the number of rows stored at price 0 because no rate
	// was in force for their GPU type and profile.
	UnpricedRows uint64
	// InsertFailures is the number of gathered sets that ClickHouse (or,
	// when their attribution needed it, PostgreSQL) refused (each set's
	// messages are redelivered later).
	InsertFailures uint64
	// UnallocatedRows is the number of rows dropped, not billed, because
	// no allocation interval of their replica covers their slot (or core)
	// at their second; ForeignRows those whose slot another replica held
	// then. A redelivered message counts its rows again.
	UnallocatedRows uint64
	ForeignRows     uint64
	// RollupRepairs is the number of rollup repairs that found keys short
	// and inserted their difference; RollupKeysRepaired counts the keys.
	RollupRepairs      uint64
	RollupKeysRepaired uint64
	// RollupRepairPending says whether some hours of the rollup may still
	// be short: a failed insert's, or the last RepairWindow's at Start, until
	// a repair of them succeeds.
	RollupRepairPending bool
	// Lag is, at the last insert, the time since the newest second it
	// stored.
	Lag time.Duration
}

// NewUsage checks cfg, fills defaults and registers metrics. It starts
// nothing; call Start.
func NewUsage(cfg UsageConfig) (*Usage, error) {
	if cfg.JS == nil || cfg.CH == nil || cfg.LoadRates == nil || cfg.LoadAllocations == nil {
		return nil, errors.New("usage consumer: JS, CH, LoadRates and LoadAllocations are required")
	}
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	defDur := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Clock == nil {
		cfg.Clock = quartz.NewReal()
	}
	if cfg.Stream == "" {
		cfg.Stream = busapi.StreamUsage
	}
	if cfg.Durable == "" {
		cfg.Durable = "ingest-usage"
	}
	def(&cfg.Workers, min(4, max(2, runtime.GOMAXPROCS(0))))
	def(&cfg.BatchRows, 200_000)
	def(&cfg.PrefetchBytes, 16<<20)
	def(&cfg.MaxAckPending, 20_000)
	def(&cfg.MaxDeliver, 2_000)
	defDur(&cfg.FlushInterval, 500*time.Millisecond)
	defDur(&cfg.AckWait, time.Minute)
	defDur(&cfg.NakDelay, time.Second)
	defDur(&cfg.MaxNakDelay, 30*time.Second)
	defDur(&cfg.RateRefresh, time.Minute)
	defDur(&cfg.Timeout, 30*time.Second)
	defDur(&cfg.RepairInterval, 30*time.Second)
	defDur(&cfg.AllocationHorizon, DefaultAllocationHorizon)
	u := &Usage{cfg: cfg, log: cfg.Log.With("consumer", cfg.Durable)}
	u.allocs = newAllocCache(cfg.LoadAllocations, cfg.AllocationHorizon, cfg.Clock)
	u.repair.wake = make(chan struct{}, 1)
	if cfg.Metrics != nil {
		if err := u.register(cfg.Metrics); err != nil {
			return nil, fmt.Errorf("usage consumer metrics: %w", err)
		}
	}
	return u, nil
}

func (u *Usage) register(r prometheus.Registerer) error {
	counter := func(name, help string, v *atomic.Uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return float64(v.Load()) })
	}
	s := &u.stats
	for _, c := range []prometheus.Collector{
		counter("mp_ingest_usage_rows_total", "Usage rows inserted into ClickHouse.", &s.rows),
		counter("mp_ingest_usage_duplicate_rows_total", "Usage rows skipped because they were already stored.", &s.dupRows),
		counter("mp_ingest_usage_repeated_rows_total", "Usage rows dropped, never billed, because the ledger already holds their slot-second from another batch.", &s.repeated),
		counter("mp_ingest_usage_looked_up_rows_total", "Usage rows looked up in ClickHouse before insert because the consumer could not rule out that they were stored.", &s.lookedUp),
		counter("mp_ingest_usage_batches_total", "Usage messages stored and acked.", &s.batches),
		counter("mp_ingest_usage_poison_total", "Usage messages terminated because they do not decode or bill another node than their subject's.", &s.poison),
		counter("mp_ingest_usage_unpriced_rows_total", "Usage rows stored at price 0 for want of a rate.", &s.unpriced),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "mp_ingest_usage_unattributed_rows_total",
			Help:        "Usage rows dropped, never billed, because no allocation interval of the control plane covers them.",
			ConstLabels: prometheus.Labels{"reason": "unallocated"}}, func() float64 { return float64(s.dropped[dropUnallocated].Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "mp_ingest_usage_unattributed_rows_total",
			Help:        "Usage rows dropped, never billed, because no allocation interval of the control plane covers them.",
			ConstLabels: prometheus.Labels{"reason": "foreign"}}, func() float64 { return float64(s.dropped[dropForeign].Load()) }),
		counter("mp_ingest_usage_insert_failures_total", "Usage inserts ClickHouse refused; their messages are redelivered.", &s.insertFailures),
		counter("mp_ingest_usage_rollup_repairs_total", "Repairs that inserted into the hourly rollup what a failed insert left out of it.", &s.rollupRepairs),
		counter("mp_ingest_usage_rollup_keys_repaired_total", "Hourly rollup keys a repair inserted a difference for.", &s.rollupKeys),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "mp_ingest_usage_rollup_repair_pending", Help: "1 while hours of the hourly rollup wait for a repair after a failed insert."},
			func() float64 {
				if u.repair.pending() {
					return 1
				}
				return 0
			}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "mp_ingest_usage_lag_seconds", Help: "Time from the newest usage second to its insert, at the last insert."},
			func() float64 { return time.Duration(s.lagNanos.Load()).Seconds() }),
	} {
		if err := r.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// Stats returns the counters so far.
func (u *Usage) Stats() UsageStats {
	s := &u.stats
	return UsageStats{
		Rows: s.rows.Load(), DuplicateRows: s.dupRows.Load(), RepeatedRows: s.repeated.Load(), LookedUpRows: s.lookedUp.Load(), Batches: s.batches.Load(), DuplicateBatches: s.dupBatches.Load(),
		Poison: s.poison.Load(), UnpricedRows: s.unpriced.Load(), InsertFailures: s.insertFailures.Load(),
		UnallocatedRows: s.dropped[dropUnallocated].Load(), ForeignRows: s.dropped[dropForeign].Load(),
		RollupRepairs: s.rollupRepairs.Load(), RollupKeysRepaired: s.rollupKeys.Load(), RollupRepairPending: u.repair.pending(),
		Lag: time.Duration(s.lagNanos.Load()),
	}
}

// Start creates or updates the durable consumer and starts consuming in the
// background until ctx ends or Stop is called. It fails only when the
// consumer cannot be created; later NATS, ClickHouse and PostgreSQL failures
// are logged and retried. A stopped Usage can be started again, so that one
// Usage (and its metrics) serves every lease a process takes. Each start
// repairs the hourly rollup of the last RepairWindow.
func (u *Usage) Start(ctx context.Context) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.run != nil {
		return errors.New("usage consumer: already started")
	}
	cctx, cancel := context.WithTimeout(ctx, u.cfg.Timeout)
	_, err := u.ensureConsumer(cctx)
	cancel()
	if err != nil {
		return err
	}
	// This run may follow another consumer's (the lease moved): it learns
	// what gpu_usage holds afresh before its first insert.
	u.known.reset()
	r := &usageRun{}
	ctx, r.cancel = context.WithCancel(ctx)
	shards := make([]chan jetstream.Msg, u.cfg.Workers)
	for i := range shards {
		shards[i] = make(chan jetstream.Msg, 256)
		r.wg.Go(func() { u.work(ctx, shards[i]) })
	}
	// A process that died with a repair pending left no note of it.
	now := u.cfg.Clock.Now()
	u.repair.add(now.Add(-RepairWindow), now)
	u.repair.poke()
	r.wg.Go(func() { u.repairRollups(ctx) })
	ready := make(chan struct{})
	r.wg.Go(func() { u.refreshRates(ctx, ready) })
	r.wg.Go(func() { u.read(ctx, ready, shards) })
	u.run = r
	return nil
}

// Stop stops pulling, inserts and acks what the workers hold (bounded by
// Timeout), and waits for every goroutine to end. Messages still unacked
// are redelivered to the next consumer after AckWait.
func (u *Usage) Stop() {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.run == nil {
		return
	}
	u.run.cancel()
	u.run.wg.Wait()
	u.run = nil
}

func (u *Usage) ensureConsumer(ctx context.Context) (jetstream.Consumer, error) {
	cons, err := u.cfg.JS.CreateOrUpdateConsumer(ctx, u.cfg.Stream, jetstream.ConsumerConfig{
		Durable:       u.cfg.Durable,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       u.cfg.AckWait,
		MaxDeliver:    u.cfg.MaxDeliver,
		MaxAckPending: u.cfg.MaxAckPending,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	})
	if err != nil {
		return nil, fmt.Errorf("usage consumer %s on %s: %w", u.cfg.Durable, u.cfg.Stream, err)
	}
	return cons, nil
}

// refreshRates loads the rate table until it has one, closing ready, then
// reloads it every RateRefresh. A failed reload keeps the table it had:
// rates change rarely and are entered ahead of their effective time.
func (u *Usage) refreshRates(ctx context.Context, ready chan<- struct{}) {
	retry := time.Second
	loaded := false
	for {
		cctx, cancel := context.WithTimeout(ctx, u.cfg.Timeout)
		p, err := u.cfg.LoadRates(cctx)
		cancel()
		wait := u.cfg.RateRefresh
		switch {
		case err == nil:
			u.rates.Store(rateTable{p})
			if !loaded {
				loaded = true
				close(ready)
			}
		case ctx.Err() != nil:
			return
		default:
			u.log.Warn("load cost rates", "err", err)
			if !loaded {
				wait = retry
				retry = min(2*retry, u.cfg.RateRefresh)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// read pulls messages and hands each to the worker of its node. It waits
// for the first rate table, and recreates the consumer and its iterator
// whenever the iterator ends for another reason than Stop (the consumer
// deleted, the connection closed for good).
func (u *Usage) read(ctx context.Context, ratesReady <-chan struct{}, shards []chan jetstream.Msg) {
	select {
	case <-ctx.Done():
		return
	case <-ratesReady:
	}
	retry := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := u.pull(ctx, shards)
		if ctx.Err() != nil {
			return
		}
		u.log.Warn("pull usage messages", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(retry):
		}
		retry = min(2*retry, 5*time.Second)
	}
}

func (u *Usage) pull(ctx context.Context, shards []chan jetstream.Msg) error {
	cctx, cancel := context.WithTimeout(ctx, u.cfg.Timeout)
	cons, err := u.ensureConsumer(cctx)
	cancel()
	if err != nil {
		return err
	}
	it, err := cons.Messages(jetstream.PullMaxBytes(u.cfg.PrefetchBytes))
	if err != nil {
		return fmt.Errorf("usage messages: %w", err)
	}
	defer it.Stop()
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	for {
		msg, err := it.Next()
		if err != nil {
			return err
		}
		select {
		case shards[shardOf(msg.Subject(), len(shards))] <- msg:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// shardOf keeps every batch of one node on one worker: the batches a worker
// checks and inserts can then never be in flight on another worker.
func shardOf(subject string, n int) int {
	h := fnv.New32a()
	h.Write([]byte(subject))
	return int(h.Sum32() % uint32(n))
}

// work gathers decoded messages until it holds BatchRows rows or the oldest
// has waited FlushInterval and its last insert has ended, then prepares
// them (prepare) and inserts them (commit) in the background while it
// gathers and prepares the next set: an insert mostly waits on ClickHouse,
// and a worker that also decoded, attributed and priced one set after the
// other left ClickHouse idle meanwhile (`modelplane bench ingest`). So a
// set grows while the insert before it runs: small at the fleet's pace,
// large in a backlog, where large inserts cost ClickHouse least. One
// insert of a worker is under way at a time, and a set is prepared only
// after the last one's rows were noted, so the check before insert sees
// every earlier row. While
// ClickHouse refuses inserts it waits longer between attempts (up to
// MaxNakDelay) and holds at most one insert's worth, so an outage costs
// neither a log line per message nor memory for the whole backlog. When
// ctx ends it stores what it holds, waits for its insert and returns.
func (u *Usage) work(ctx context.Context, in <-chan jetstream.Msg) {
	var (
		held     []heldBatch
		rows     int
		timer    = time.NewTimer(time.Hour)
		backoff  time.Duration // 0 while inserts succeed
		failures int
		inflight chan error // the insert under way; nil when none
		due      bool       // FlushInterval passed while an insert was under way
	)
	timer.Stop()
	add := func(msg jetstream.Msg) {
		b, ok := u.decode(msg)
		if !ok {
			return
		}
		if len(held) == 0 {
			timer.Reset(max(u.cfg.FlushInterval, backoff))
		}
		held = append(held, b)
		rows += len(b.batch.Records)
	}
	outcome := func(err error) {
		switch {
		case err == nil && failures > 0:
			u.log.Info("usage inserts resumed", "failed_attempts", failures)
			backoff, failures = 0, 0
		case err != nil:
			if failures == 0 {
				u.log.Warn("usage insert failed; retrying by redelivery", "err", err)
			} else {
				u.log.Debug("usage insert failed again", "attempt", failures+1, "err", err)
			}
			failures++
			backoff = min(max(2*backoff, u.cfg.NakDelay), u.cfg.MaxNakDelay)
		}
	}
	// settle waits for the insert under way, if any, and takes its outcome.
	settle := func() {
		if inflight != nil {
			outcome(<-inflight)
			inflight = nil
		}
	}
	// An insert under way when Stop comes is finished, not abandoned: its
	// rows would be stored and its messages redelivered for nothing.
	flush := func() {
		timer.Stop()
		due = false
		if len(held) == 0 {
			return
		}
		p, err := u.prepare(context.WithoutCancel(ctx), held, settle)
		held, rows = nil, 0
		settle()
		if err != nil {
			outcome(err)
			return
		}
		done := make(chan error, 1)
		inflight = done
		go func() { done <- u.commit(context.WithoutCancel(ctx), p) }()
	}
	for {
		recv := in
		if backoff > 0 && rows >= u.cfg.BatchRows {
			recv = nil
		}
		select {
		case msg := <-recv:
			add(msg)
			if rows >= u.cfg.BatchRows && backoff == 0 {
				flush()
			}
		case err := <-inflight:
			inflight = nil
			outcome(err)
			switch {
			case !due:
			case backoff > 0:
				// The insert failed: the next waits its turn.
				due = false
				timer.Reset(backoff)
			default:
				flush()
			}
		case <-timer.C:
			if inflight != nil {
				due = true
				continue
			}
			flush()
		case <-ctx.Done():
			// Take what the reader already handed over: it is delivered,
			// and storing it now spares a redelivery after AckWait.
		drain:
			for {
				select {
				case msg := <-in:
					add(msg)
				default:
					break drain
				}
			}
			flush()
			settle()
			return
		}
	}
}

// nakDelay grows with the delivery count so that an outage is retried
// quickly at first and then without hammering ClickHouse.
func (u *Usage) nakDelay(msg jetstream.Msg) time.Duration {
	n := uint64(1)
	if md, err := msg.Metadata(); err == nil && md.NumDelivered > 0 {
		n = md.NumDelivered
	}
	d := u.cfg.NakDelay
	for i := uint64(1); i < n && d < u.cfg.MaxNakDelay; i++ {
		d *= 2
	}
	return min(d, u.cfg.MaxNakDelay)
}

func (u *Usage) pricer() Pricer {
	t, _ := u.rates.Load().(rateTable)
	return t.Pricer
}
