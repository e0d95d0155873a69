package ingest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/ext"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/nats-io/nats.go/jetstream"

	"modelplane/busapi"
)

// PullConfig configures a small consumer (ReqStatsConfig, PredictionsConfig).
// JS and CH are required; a zero value of any other field takes the default
// its comment names or the consumer's own.
type PullConfig struct {
	JS  jetstream.JetStream
	CH  driver.Conn
	Log *slog.Logger

	// Stream is the stream consumed; Durable names the durable consumer.
	Stream  string
	Durable string
	// Batch is the most messages fetched and inserted at once.
	Batch int
	// MaxBytes, when set, also bounds a fetch by its messages' bytes, with
	// their subjects and headers; it is raised to twice busapi.MaxMsgBytes
	// at least, since a fetch smaller than a message never returns it.
	MaxBytes int
	// MaxWait bounds how long a fetch waits for Batch messages; default 1s.
	MaxWait time.Duration
	// AckWait is how long the server waits for an ack before it
	// redelivers; default 1 minute, above Timeout.
	AckWait time.Duration
	// MaxDeliver bounds deliveries of one message; default 2,000, which with
	// the growing NakDelay rides out hours of ClickHouse outage.
	MaxDeliver int
	// NakDelay is the redelivery delay after the first failed insert,
	// doubling with each delivery up to MaxNakDelay; defaults 1s and 30s.
	NakDelay    time.Duration
	MaxNakDelay time.Duration
	// Timeout bounds each NATS and ClickHouse call; default 30s.
	Timeout time.Duration
}

// defaults checks cfg and fills what is unset.
func (cfg *PullConfig) defaults(name, stream, durable string, batch int) error {
	if cfg.JS == nil || cfg.CH == nil {
		return fmt.Errorf("%s consumer: JS and CH are required", name)
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Stream == "" {
		cfg.Stream = stream
	}
	if cfg.Durable == "" {
		cfg.Durable = durable
	}
	if cfg.Batch <= 0 {
		cfg.Batch = batch
	}
	if cfg.MaxBytes > 0 {
		cfg.MaxBytes = max(cfg.MaxBytes, 2*busapi.MaxMsgBytes)
	}
	if cfg.MaxDeliver <= 0 {
		cfg.MaxDeliver = 2_000
	}
	for _, d := range []struct {
		v   *time.Duration
		def time.Duration
	}{{&cfg.MaxWait, time.Second}, {&cfg.AckWait, time.Minute}, {&cfg.NakDelay, time.Second},
		{&cfg.MaxNakDelay, 30 * time.Second}, {&cfg.Timeout, 30 * time.Second}} {
		if *d.v <= 0 {
			*d.v = d.def
		}
	}
	return nil
}

// newPullLoop builds the fetch loop of a consumer with cfg's settings;
// decode and store are the consumer's (see pullLoop).
func newPullLoop[H any](cfg PullConfig, name string, log *slog.Logger, decode func([]jetstream.Msg) []H,
	store func(context.Context, []H) error) pullLoop[H] {
	return pullLoop[H]{name: name, js: cfg.JS, stream: cfg.Stream, durable: cfg.Durable, batch: cfg.Batch, maxBytes: cfg.MaxBytes, maxDeliver: cfg.MaxDeliver,
		maxWait: cfg.MaxWait, ackWait: cfg.AckWait, nakDelay: cfg.NakDelay, maxNakDelay: cfg.MaxNakDelay, timeout: cfg.Timeout,
		log: log, decode: decode, store: store}
}

// pullLoop is the fetch loop of the small consumers (request statistics,
// prediction samples): a durable pull consumer with explicit acks, fetched
// in sets that decode turns into held messages (terminating poison) and
// store inserts and acks (or naks). Fetching and decoding the next sets
// runs while the last one is stored: a set spends most of its time waiting
// on JetStream and ClickHouse, and one set at a time left each of them
// idle while the other worked (`modelplane bench ingest`). The sets
// fetched meanwhile, up to aheadSets, are stored together in one insert:
// in a backlog inserts grow to several sets, which costs ClickHouse less
// a row than one insert a set (a part and a pass of every view each).
// Stores are still one at a time, in order, so a store's dedup query sees
// every earlier store's insert. Each consumer embeds one for Start, Stop
// and Run.
// The usage consumer, which must go much faster, has a loop of its own.
type pullLoop[H any] struct {
	name       string // in logs and errors: "reqstats", "predictions"
	js         jetstream.JetStream
	stream     string
	durable    string
	batch      int
	maxBytes   int
	maxDeliver int
	maxWait    time.Duration
	ackWait    time.Duration
	nakDelay   time.Duration
	// maxNakDelay bounds the wait after a failed fetch or store.
	maxNakDelay time.Duration
	timeout     time.Duration
	log         *slog.Logger
	decode      func(msgs []jetstream.Msg) []H
	store       func(ctx context.Context, held []H) error

	mu  sync.Mutex
	run *usageRun // nil while stopped
}

// Start creates or updates the durable consumer and consumes in the
// background until ctx ends or Stop is called. It fails only when the
// consumer cannot be created; later failures are logged and retried. A
// stopped consumer can be started again.
func (c *pullLoop[H]) Start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.run != nil {
		return fmt.Errorf("%s consumer: already started", c.name)
	}
	cctx, cancel := context.WithTimeout(ctx, c.timeout)
	_, err := c.ensureConsumer(cctx)
	cancel()
	if err != nil {
		return err
	}
	r := &usageRun{}
	ctx, r.cancel = context.WithCancel(ctx)
	sets := make(chan []H, aheadSets)
	r.wg.Go(func() { c.fetch(ctx, sets) })
	r.wg.Go(func() { c.loop(ctx, sets) })
	c.run = r
	return nil
}

// Stop stops consuming and waits for the insert under way, if any, and
// for the set fetched ahead of it.
func (c *pullLoop[H]) Stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.run == nil {
		return
	}
	c.run.cancel()
	c.run.wg.Wait()
	c.run = nil
}

func (c *pullLoop[H]) ensureConsumer(ctx context.Context) (jetstream.Consumer, error) {
	cons, err := c.js.CreateOrUpdateConsumer(ctx, c.stream, jetstream.ConsumerConfig{
		Durable:       c.durable,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       c.ackWait,
		MaxDeliver:    c.maxDeliver,
		MaxAckPending: 10 * c.batch,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	})
	if err != nil {
		return nil, fmt.Errorf("%s consumer %s on %s: %w", c.name, c.durable, c.stream, err)
	}
	return cons, nil
}

// fetch fetches and decodes sets of messages and hands them to loop until
// ctx ends, then closes sets. After a failed fetch it waits, growing the
// wait up to MaxNakDelay.
func (c *pullLoop[H]) fetch(ctx context.Context, sets chan<- []H) {
	defer close(sets)
	var cons jetstream.Consumer
	backoff, want := time.Duration(0), c.batch
	for ctx.Err() == nil {
		if backoff > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
		}
		if cons == nil {
			cctx, cancel := context.WithTimeout(ctx, c.timeout)
			var err error
			cons, err = c.ensureConsumer(cctx)
			cancel()
			if err != nil {
				c.log.Warn(c.name+" consumer", "err", err)
				backoff = min(max(2*backoff, 100*time.Millisecond), c.maxNakDelay)
				continue
			}
		}
		opts := []jetstream.FetchOpt{jetstream.FetchMaxWait(c.maxWait)}
		if c.maxBytes > 0 {
			opts = append(opts, jetstream.FetchMaxBytes(c.maxBytes))
		}
		batch, err := cons.Fetch(want, opts...)
		if err != nil {
			if ctx.Err() == nil {
				c.log.Warn("fetch "+c.name, "err", err)
			}
			cons = nil
			backoff = min(max(2*backoff, 100*time.Millisecond), c.maxNakDelay)
			continue
		}
		backoff = 0
		var msgs []jetstream.Msg
		for m := range batch.Messages() {
			msgs = append(msgs, m)
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) && ctx.Err() == nil {
			c.log.Debug("fetch "+c.name, "err", err)
		}
		if len(msgs) == 0 {
			want = c.batch
			continue
		}
		// The end of a backlog is fetched as it is, not waited on for
		// MaxWait until a whole set arrives: a fetch ends when it has
		// its count.
		want = c.batch
		if md, err := msgs[len(msgs)-1].Metadata(); err == nil && md.NumPending > 0 && md.NumPending < uint64(c.batch) {
			want = int(md.NumPending)
		}
		held := c.decode(msgs)
		if len(held) == 0 {
			continue
		}
		// A set fetched is handed over even when Stop comes meanwhile:
		// loop stores it rather than leave it to a redelivery.
		sets <- held
	}
}

// held are the items of one message of a small stream (a gateway's batch,
// or a lone item from a gateway older than batches), and the message (nil
// for the Store functions) with its stream sequence.
type held[T any] struct {
	msg   jetstream.Msg
	seq   uint64
	items []T
}

// heldCounters are a small consumer's counts of what decodeHeld turns away.
type heldCounters struct {
	// poison counts messages terminated; refused, items left out of a
	// message whose other items were kept.
	poison, refused *atomic.Uint64
}

// decodeHeld parses msgs with decode and checks each item with check: an
// item that cannot be stored is left out of its message, and a message
// with none that can is terminated. Log lines name the subject and the
// reason, never an item's content; what names the items ("prediction
// samples").
func decodeHeld[T any](msgs []jetstream.Msg, log *slog.Logger, what string, n heldCounters,
	decode func(subject string, data []byte) ([]T, error), check func(*T) error) []held[T] {
	out := make([]held[T], 0, len(msgs))
	for _, m := range msgs {
		items, err := decode(m.Subject(), m.Data())
		kept, refused := items[:0], uint64(0)
		for i := range items {
			if ierr := check(&items[i]); ierr != nil {
				err, refused = fmt.Errorf("item %d: %w", i, ierr), refused+1
				continue
			}
			kept = append(kept, items[i])
		}
		if len(kept) == 0 {
			if err == nil { // a message that decodes to no item
				err = errors.New("no " + what + " in the message")
			}
			n.poison.Add(1)
			log.Error(what+" terminated", "subject", m.Subject(), "err", err)
			if terr := m.TermWithReason(err.Error()); terr != nil {
				log.Warn("terminate "+what, "err", terr)
			}
			continue
		}
		if refused > 0 {
			n.refused.Add(refused)
			log.Error(what+" refused", "subject", m.Subject(), "refused", refused, "kept", len(kept), "last_err", err)
		}
		var seq uint64
		if md, err := m.Metadata(); err == nil {
			seq = md.Sequence.Stream
		}
		out = append(out, held[T]{msg: m, seq: seq, items: kept})
	}
	return out
}

// aheadSets is how many fetched sets wait for the store under way; the
// consumer's MaxAckPending, ten sets, covers them, the one being stored
// and the one being fetched.
const aheadSets = 4

// loop stores the sets fetch hands over, with those waiting behind them,
// until fetch stops. After a failed store it waits, growing the wait up
// to MaxNakDelay (the sets' messages were nakked with their own delay).
func (c *pullLoop[H]) loop(ctx context.Context, sets <-chan []H) {
	backoff := time.Duration(0)
	for held := range sets {
	more:
		for range aheadSets {
			select {
			case next, ok := <-sets:
				if !ok {
					break more
				}
				held = append(held, next...)
			default:
				break more
			}
		}
		if backoff > 0 && ctx.Err() != nil {
			// Stopping while ClickHouse refuses: the messages come back
			// after AckWait, as those of a process that died.
			continue
		}
		if backoff > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(backoff):
			}
		}
		// An insert under way when Stop comes is finished, not abandoned.
		if err := c.store(context.WithoutCancel(ctx), held); err != nil {
			backoff = min(max(2*backoff, c.nakDelay), c.maxNakDelay)
			continue
		}
		backoff = 0
	}
}

// idQuery is a fetched set's message ids with the endpoints and the time
// range (Unix milliseconds) they fall in, for a dedup query narrowed by a
// table's sort key.
type idQuery struct {
	ids, endpoints []string
	seen           map[string]bool
	from, to       int64
}

func (q *idQuery) add(id, endpoint string, t int64) {
	q.ids = append(q.ids, id)
	if q.seen == nil {
		q.seen = map[string]bool{}
	}
	if !q.seen[endpoint] {
		q.seen[endpoint] = true
		q.endpoints = append(q.endpoints, endpoint)
	}
	q.from, q.to = min(q.from, t), max(q.to, t)
}

// stored runs query, whose three parameters are the endpoints and the
// range's first and last second and which names the ids as the table
// held_ids (id String), and returns the ids it found. The ids travel as
// external data beside the query, not in its text: ClickHouse refuses a
// query over 256 KiB by default, and chunks of a fetched set's 10,000 ids
// each read the same granules again (five queries a set took most of the
// predictions consumer's time in `modelplane bench ingest`).
func (q *idQuery) stored(ctx context.Context, ch driver.Conn, query string) (map[string]bool, error) {
	stored := make(map[string]bool)
	err := q.query(ctx, ch, query, func(rows driver.Rows) error {
		var id string
		if err := rows.Scan(&id); err != nil {
			return err
		}
		stored[id] = true
		return nil
	})
	return stored, err
}

// query runs query as stored does and hands each row to scan.
func (q *idQuery) query(ctx context.Context, ch driver.Conn, query string, scan func(driver.Rows) error) error {
	ids, err := ext.NewTable("held_ids", ext.Column("id", "String"))
	if err != nil {
		return err
	}
	for _, id := range q.ids {
		if err := ids.Append(id); err != nil {
			return err
		}
	}
	rows, err := ch.Query(clickhouse.Context(ctx, clickhouse.WithExternalTable(ids)), query, set(q.endpoints), q.from/1000, q.to/1000)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := scan(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

// SendColumns inserts cols, typed column slices of one length in the
// order of stmt's column list, in one INSERT. Every consumer inserts
// through it, and `modelplane bench ingest` measures ClickHouse's own
// ceiling through it, so both pay the same client-side cost.
func SendColumns(ctx context.Context, ch driver.Conn, stmt string, cols []any) error {
	batch, err := ch.PrepareBatch(ctx, stmt)
	if err != nil {
		return err
	}
	defer batch.Close()
	for i, col := range cols {
		if err := appendColumn(batch.Column(i), col); err != nil {
			return fmt.Errorf("column %d: %w", i, err)
		}
	}
	return batch.Send()
}

// appendColumn appends a whole column. An array column's rows go one
// typed slice at a time: the driver's Append of a [][]T walks it by
// reflection and boxes every element (a third of the request statistics
// consumer's CPU in `modelplane bench ingest`), while its AppendRow of a
// []T takes a path without reflection.
func appendColumn(c driver.BatchColumn, col any) error {
	switch rows := col.(type) {
	case [][]uint64:
		return appendRows(c, rows)
	case [][]float64:
		return appendRows(c, rows)
	case [][]string:
		return appendRows(c, rows)
	case [][]uint16:
		return appendRows(c, rows)
	case [][]int64:
		return appendRows(c, rows)
	}
	return c.Append(col)
}

func appendRows[T any](c driver.BatchColumn, rows [][]T) error {
	for _, r := range rows {
		if err := c.AppendRow(r); err != nil {
			return err
		}
	}
	return nil
}
