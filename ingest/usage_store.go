package ingest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/nats-io/nats.go/jetstream"

	"modelplane/busapi"
)

// heldBatch is a decoded message a worker holds until it is stored.
type heldBatch struct {
	msg      jetstream.Msg
	batch    busapi.UsageBatch
	received time.Time
	// rowIdx is, once attribution dropped records, the index in the
	// message of each record kept; nil while Records is the whole message.
	rowIdx []uint32
	// redelivered is set when JetStream delivered the message before (or
	// cannot say): every row of it is looked up in gpu_usage.
	redelivered bool
}

// idx is the row_idx of the i-th kept record.
func (h *heldBatch) idx(i int) uint32 {
	if h.rowIdx == nil {
		return uint32(i)
	}
	return h.rowIdx[i]
}

// decode parses and checks one message. A message that cannot be stored
// however often it is redelivered is terminated here, logged and counted.
func (u *Usage) decode(msg jetstream.Msg) (heldBatch, bool) {
	var b busapi.UsageBatch
	err := decodeBatch(msg.Data(), &b)
	if err == nil {
		err = checkBatch(msg.Subject(), &b)
	}
	if err == nil {
		md, mdErr := msg.Metadata()
		return heldBatch{msg: msg, batch: b, received: u.cfg.Clock.Now(), redelivered: mdErr != nil || md.NumDelivered > 1}, true
	}
	u.stats.poison.Add(1)
	var seq uint64
	if md, mdErr := msg.Metadata(); mdErr == nil {
		seq = md.Sequence.Stream
	}
	reason := err.Error()
	if len(reason) > 200 {
		reason = reason[:200]
	}
	u.log.Error("usage message terminated", "subject", msg.Subject(), "stream_seq", seq, "batch_id", b.ID, "err", reason)
	if err := msg.TermWithReason(reason); err != nil {
		u.log.Warn("terminate usage message", "stream_seq", seq, "err", err)
	}
	return heldBatch{}, false
}

// usagePrefix is what UsageSubject puts before the node name.
var usagePrefix = busapi.UsageSubject("")

// checkBatch refuses what ClickHouse cannot hold and any batch that bills a
// node other than the one whose subject it came on: the batch id is only
// unique per node, and the dedup query is narrowed by node.
func checkBatch(subject string, b *busapi.UsageBatch) error {
	node, ok := strings.CutPrefix(subject, usagePrefix)
	switch {
	case !ok || node == "":
		return fmt.Errorf("subject %q is not a usage subject", subject)
	case b.ID == "" || len(b.ID) > 256:
		return errors.New("batch id empty or longer than 256 bytes")
	case b.Node != node:
		return fmt.Errorf("batch node %q published on %q", b.Node, subject)
	case len(b.Records) > math.MaxUint32:
		return errors.New("too many records")
	}
	for i, r := range b.Records {
		switch {
		case r.Node != b.Node:
			return fmt.Errorf("record %d: node %q in a batch of %q", i, r.Node, b.Node)
		case r.Time <= 0 || r.Time > math.MaxUint32:
			return fmt.Errorf("record %d: time %d out of range", i, r.Time)
		case r.GPU < 0 || r.GPU > math.MaxUint16 || r.Slice < 0 || r.Slice > math.MaxUint16:
			return fmt.Errorf("record %d: gpu %d slice %d out of range", i, r.GPU, r.Slice)
		case r.MemoryMB < 0 || r.Requests < 0:
			return fmt.Errorf("record %d: negative memory or requests", i)
		}
	}
	return nil
}

// prepared is a gathered set of messages ready to insert: what prepare
// decided for commit.
type prepared struct {
	held                []heldBatch
	db                  string
	cols                usageColumns
	ids                 []string // batches with rows to insert
	skip                skips
	newest              int64
	dropped             [dropReasons]uint64
	dupRows, dupBatches uint64
}

// prepare decides which rows of held to insert: it attributes and prices
// them and keeps those whose slot-second gpu_usage does not hold yet.
// A worker prepares its next set while its last insert is under way, so
// settle, which waits for that insert to end, is called before any lookup
// in gpu_usage: the rows prepare inserts without one were ruled out by
// the run's memory, which noted the last insert's rows before it was sent.
// On a failure it naks every message with a delay and returns the error.
func (u *Usage) prepare(ctx context.Context, held []heldBatch, settle func()) (*prepared, error) {
	p := &prepared{held: held}
	// The first copy of a batch is the one stored; later copies (a
	// redelivery, or a replay JetStream no longer recognised as a
	// duplicate) are acked with it.
	seen := make(map[batchKey]bool, len(held))
	uniq := make([]*heldBatch, 0, len(held))
	rows := 0
	for i := range held {
		b := &held[i].batch
		if seen[keyOf(b)] {
			p.dupBatches++
			p.dupRows += uint64(len(b.Records))
			continue
		}
		seen[keyOf(b)] = true
		uniq = append(uniq, &held[i])
		rows += len(b.Records)
	}
	prices := u.pricer()
	if prices == nil {
		u.retry(held)
		return nil, errors.New("no rate table loaded")
	}
	ctx, cancel := context.WithTimeout(ctx, u.cfg.Timeout)
	defer cancel()
	var err error
	if p.dropped, err = u.attribute(ctx, uniq); err != nil {
		u.retry(held)
		return nil, fmt.Errorf("read allocations: %w", err)
	}
	if err := u.known.load(ctx, u.cfg.CH, u.cfg.Clock.Now()); err != nil {
		u.retry(held)
		return nil, err
	}
	look, n := u.known.classify(uniq)
	u.stats.lookedUp.Add(uint64(n))
	// With nothing to look up every row is a slot-second of its own that
	// gpu_usage lacks (classify), so columns compares none.
	var stored map[slotSecond]rowID
	if n > 0 {
		stored = make(map[slotSecond]rowID, rows)
		settle()
		if err := u.storedSlots(ctx, look, stored); err != nil {
			u.retry(held)
			return nil, fmt.Errorf("find stored usage rows: %w", err)
		}
	}
	if p.db, err = u.database(ctx); err != nil {
		u.retry(held)
		return nil, err
	}
	p.cols, p.ids, p.skip, p.newest = u.columns(prices, uniq, stored)
	p.dupRows += p.skip.replayed
	p.dupBatches += p.skip.batches
	return p, nil
}

// commit inserts what prepare kept, then acks every message. On a
// ClickHouse failure it naks them all with a delay and returns the error;
// the redelivered messages are looked up, so whatever part of the insert
// did land is not written twice.
func (u *Usage) commit(ctx context.Context, p *prepared) error {
	ctx, cancel := context.WithTimeout(ctx, u.cfg.Timeout)
	defer cancel()
	if n := len(p.cols.batchID); n > 0 {
		if err := u.insert(ctx, p.db, p.cols); err != nil {
			// ClickHouse 18.16 may have stored the rows and not fed them
			// to the rollup's view; the redelivery will skip them as
			// stored, so only a repair brings the rollup level.
			oldest := slices.Min(p.cols.ts)
			u.repair.add(time.Unix(oldest, 0), time.Unix(p.newest+1, 0))
			u.retry(p.held)
			return fmt.Errorf("insert usage rows: %w", err)
		}
		u.stats.rows.Add(uint64(n))
		u.stats.lagNanos.Store(int64(u.cfg.Clock.Now().Sub(time.Unix(p.newest, 0))))
	}
	if u.cfg.AfterInsert != nil {
		if err := u.cfg.AfterInsert(p.ids); err != nil {
			u.log.Debug("usage messages abandoned after insert", "messages", len(p.held), "err", err)
			return nil
		}
	}
	// Counted before the acks, so that whoever sees a message acked sees
	// it counted.
	u.stats.batches.Add(uint64(len(p.held)))
	u.stats.dupBatches.Add(p.dupBatches)
	u.stats.dupRows.Add(p.dupRows)
	for reason, n := range p.dropped {
		u.stats.dropped[reason].Add(n)
	}
	if len(p.skip.repeatedBy) > 0 {
		for node, n := range p.skip.repeatedBy {
			u.stats.repeated.Add(n)
			u.log.Warn("usage rows repeat slot-seconds already billed under another batch; dropped", "node", node, "rows", n)
		}
	}
	// A lost ack only costs a redelivery, which the check above skips; so
	// acks are not confirmed by the server.
	for _, h := range p.held {
		if err := h.msg.Ack(); err != nil {
			u.log.Debug("ack usage message", "err", err)
		}
	}
	u.repair.poke()
	return nil
}

// retry naks held for redelivery after a delay. A message on its last
// delivery is logged as an error: JetStream stops delivering it, and an
// operator must replay it from the stream (safe, as stored rows are
// skipped).
func (u *Usage) retry(held []heldBatch) {
	u.stats.insertFailures.Add(1)
	for _, h := range held {
		if md, err := h.msg.Metadata(); err == nil && md.NumDelivered >= uint64(u.cfg.MaxDeliver) {
			u.log.Error("usage message reached MaxDeliver and will not be redelivered; replay it from the stream",
				"stream_seq", md.Sequence.Stream, "node", h.batch.Node, "batch_id", h.batch.ID)
		}
		if err := h.msg.NakWithDelay(u.nakDelay(h.msg)); err != nil {
			u.log.Debug("nak usage message", "err", err)
		}
	}
}

// batchKey names a batch. Agents put the node in the id, but the id is only
// promised unique per node, so the node is part of the key.
type batchKey struct{ node, id string }

func keyOf(b *busapi.UsageBatch) batchKey { return batchKey{b.Node, b.ID} }

// slotSecond is what the ledger bills once: one second of one slot (a GPU
// and slice, or a CPU replica's core) held by one replica on one node.
// gpu_usage never holds two rows of one slotSecond, whatever batches they
// came in.
type slotSecond struct {
	node, replica string
	gpu, slice    uint16
	ts            int64
}

func slotOf(r *busapi.Usage) slotSecond {
	return slotSecond{node: r.Node, replica: r.Replica, gpu: uint16(r.GPU), slice: uint16(r.Slice), ts: r.Time}
}

// rowID is where a stored row came from: its batch and index there. A row
// found stored under its own rowID is a redelivery; under another, a
// repeat.
type rowID struct {
	batch string
	idx   uint32
}

// storedRanges bounds the node time ranges in one query: ClickHouse limits
// a query to 256 KiB of text by default.
const storedRanges = 500

// rangeGap is the widest run of seconds without a held row that one range
// still spans: an agent's spool replayed beside live seconds makes two
// ranges, not one that reads the hours between them.
const rangeGap = 60

// nodeRange is a run of seconds of one node, both ends included.
type nodeRange struct {
	node     string
	from, to int64
}

// storedSlots adds to stored which slot-seconds of the nodes and seconds
// of secs gpu_usage already holds, and from which batch row. The query
// names each node and the runs of seconds its rows cover, which is the
// table's sort key (node, ts, …), so ClickHouse reads only the granules
// those rows could be in.
func (u *Usage) storedSlots(ctx context.Context, secs map[string][]int64, stored map[slotSecond]rowID) error {
	ranges := heldRanges(secs)
	for len(ranges) > 0 {
		chunk := ranges[:min(storedRanges, len(ranges))]
		ranges = ranges[len(chunk):]
		var (
			where strings.Builder
			args  = make([]any, 0, 3*len(chunk))
		)
		for i, r := range chunk {
			if i > 0 {
				where.WriteString(" OR ")
			}
			where.WriteString("(node = ? AND ts >= toDateTime(?) AND ts <= toDateTime(?))")
			args = append(args, r.node, r.from, r.to)
		}
		rows, err := u.cfg.CH.Query(ctx, `SELECT node, replica, gpu, slice, toUInt32(ts), batch_id, row_idx FROM gpu_usage WHERE `+where.String(), args...)
		if err != nil {
			return err
		}
		for rows.Next() {
			var (
				k  slotSecond
				ts uint32
				id rowID
			)
			if err := rows.Scan(&k.node, &k.replica, &k.gpu, &k.slice, &ts, &id.batch, &id.idx); err != nil {
				rows.Close()
				return err
			}
			k.ts = int64(ts)
			if _, ok := stored[k]; !ok {
				stored[k] = id
			}
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

// heldRanges is, per node, the runs of seconds secs holds, split where
// rangeGap seconds pass without one.
func heldRanges(secs map[string][]int64) []nodeRange {
	var out []nodeRange
	for node, ts := range secs {
		slices.Sort(ts)
		cur := nodeRange{node: node, from: ts[0], to: ts[0]}
		for _, t := range ts[1:] {
			if t-cur.to > rangeGap {
				out = append(out, cur)
				cur.from = t
			}
			cur.to = t
		}
		out = append(out, cur)
	}
	return out
}

// set binds strings as an IN list, "('a', 'b')": a plain slice binds as
// an Array, which IN refuses.
func set(ss []string) clickhouse.GroupSet {
	g := clickhouse.GroupSet{Value: make([]any, len(ss))}
	for i, s := range ss {
		g.Value[i] = s
	}
	return g
}

// usageColumns are the gpu_usage columns of the rows to insert, in the
// order of UsageInsert; a columnar append is several times cheaper than
// one Append per row.
type usageColumns struct {
	ts                                                        []int64
	node                                                      []string
	gpu, slice                                                []uint16
	gpuType, profile, team, endpoint, model, version, replica []string
	util                                                      []float32
	memory, requests, rate                                    []uint64
	batchID                                                   []string
	rowIdx                                                    []uint32
}

// UsageInsert is the consumer's INSERT into gpu_usage; `modelplane bench
// ingest` sends the same rows with it to measure ClickHouse's own ceiling.
const UsageInsert = "INSERT INTO gpu_usage (ts, node, gpu, slice, gpu_type, profile, team, endpoint, model, version, replica, " +
	"util_pct, memory_mb, requests, rate_uusd_per_hour, batch_id, row_idx)"

func (c *usageColumns) list() []any {
	return []any{c.ts, c.node, c.gpu, c.slice, c.gpuType, c.profile, c.team, c.endpoint, c.model, c.version, c.replica,
		c.util, c.memory, c.requests, c.rate, c.batchID, c.rowIdx}
}

// skips is what columns left out: rows gpu_usage holds already from their
// own batch (a redelivery or replay), rows whose slot-second the ledger
// holds from another batch, or another held row took (repeats, by node),
// and the batches none of whose rows needed inserting.
type skips struct {
	replayed   uint64
	repeatedBy map[string]uint64
	batches    uint64
}

// columns prices the rows whose slot-second is not stored yet and lays them
// out by column; of several held rows of one slot-second only the first is
// kept. It returns the ids of the batches with rows to insert, what it
// skipped, and the newest second among the rows. columns adds the
// slot-seconds it keeps to stored; a nil stored says that the rows are
// distinct slot-seconds none of which is stored, and keeps every one.
func (u *Usage) columns(prices Pricer, batches []*heldBatch, stored map[slotSecond]rowID) (c usageColumns, ids []string, skip skips, newest int64) {
	n := 0
	for _, h := range batches {
		n += len(h.batch.Records)
	}
	c = usageColumns{
		ts: make([]int64, 0, n), node: make([]string, 0, n), gpu: make([]uint16, 0, n), slice: make([]uint16, 0, n),
		gpuType: make([]string, 0, n), profile: make([]string, 0, n), team: make([]string, 0, n), endpoint: make([]string, 0, n),
		model: make([]string, 0, n), version: make([]string, 0, n), replica: make([]string, 0, n), util: make([]float32, 0, n),
		memory: make([]uint64, 0, n), requests: make([]uint64, 0, n), rate: make([]uint64, 0, n), batchID: make([]string, 0, n),
		rowIdx: make([]uint32, 0, n),
	}
	var unpriced uint64
	for _, h := range batches {
		b := &h.batch
		added := false
		for i := range b.Records {
			r := &b.Records[i]
			idx := h.idx(i)
			if stored != nil {
				k := slotOf(r)
				if by, ok := stored[k]; ok {
					if by == (rowID{b.ID, idx}) {
						skip.replayed++
					} else {
						if skip.repeatedBy == nil {
							skip.repeatedBy = make(map[string]uint64)
						}
						skip.repeatedBy[r.Node]++
					}
					continue
				}
				stored[k] = rowID{b.ID, idx}
			}
			rate, ok := prices.At(r.GPUType, r.Profile, time.Unix(r.Time, 0))
			if !ok {
				unpriced++
				u.warnUnpriced(r.GPUType, r.Profile)
			}
			c.ts = append(c.ts, r.Time)
			c.node = append(c.node, r.Node)
			c.gpu = append(c.gpu, uint16(r.GPU))
			c.slice = append(c.slice, uint16(r.Slice))
			c.gpuType = append(c.gpuType, r.GPUType)
			c.profile = append(c.profile, r.Profile)
			c.team = append(c.team, r.Team)
			c.endpoint = append(c.endpoint, r.Endpoint)
			c.model = append(c.model, r.Model)
			c.version = append(c.version, r.Version)
			c.replica = append(c.replica, r.Replica)
			c.util = append(c.util, float32(r.UtilPct))
			c.memory = append(c.memory, uint64(r.MemoryMB))
			c.requests = append(c.requests, uint64(r.Requests))
			c.rate = append(c.rate, uint64(max(rate, 0)))
			c.batchID = append(c.batchID, b.ID)
			c.rowIdx = append(c.rowIdx, idx)
			newest = max(newest, r.Time)
			added = true
		}
		if added {
			ids = append(ids, b.ID)
		} else if len(b.Records) > 0 {
			skip.batches++
		}
	}
	u.stats.unpriced.Add(unpriced)
	return c, ids, skip, newest
}

// warnUnpriced logs a GPU type and profile without a rate once per process:
// every second of such an allocation would otherwise log a line.
func (u *Usage) warnUnpriced(gpuType, profile string) {
	if _, loaded := u.warned.LoadOrStore(gpuType+"/"+profile, struct{}{}); !loaded {
		u.log.Warn("no cost rate in force; usage stored at price 0", "gpu_type", gpuType, "profile", profile)
	}
}

// insert writes the rows in one INSERT with its column list: ClickHouse
// 18.16 sees no columns in a batch without one. It is tagged as a write of
// database db for RepairRollup, and holds off the consumer's repairs.
func (u *Usage) insert(ctx context.Context, db string, c usageColumns) error {
	u.repair.writes.RLock()
	defer u.repair.writes.RUnlock()
	return SendColumns(writeContext(ctx, db), u.cfg.CH, UsageInsert, c.list())
}
