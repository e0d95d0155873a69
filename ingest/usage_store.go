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
		return heldBatch{msg: msg, batch: b, received: u.cfg.Clock.Now()}, true
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

// store writes the rows of held that gpu_usage does not hold yet, then acks
// every message. On a ClickHouse failure it naks them all with a delay and
// returns the error; the redelivered messages go through the same check, so
// whatever part of the insert did land is not written twice.
func (u *Usage) store(ctx context.Context, held []heldBatch) error {
	// The first copy of a batch is the one stored; later copies (a
	// redelivery, or a replay JetStream no longer recognised as a
	// duplicate) are acked with it.
	seen := make(map[batchKey]bool, len(held))
	uniq := make([]*heldBatch, 0, len(held))
	var dupBatches, dupRows uint64
	for i := range held {
		b := &held[i].batch
		if seen[keyOf(b)] {
			dupBatches++
			dupRows += uint64(len(b.Records))
			continue
		}
		seen[keyOf(b)] = true
		uniq = append(uniq, &held[i])
	}
	prices := u.pricer()
	if prices == nil {
		u.retry(held)
		return errors.New("no rate table loaded")
	}
	ctx, cancel := context.WithTimeout(ctx, u.cfg.Timeout)
	defer cancel()
	dropped, err := u.attribute(ctx, uniq)
	if err != nil {
		u.retry(held)
		return fmt.Errorf("read allocations: %w", err)
	}
	stored, err := u.storedRows(ctx, uniq)
	if err != nil {
		u.retry(held)
		return fmt.Errorf("find stored usage rows: %w", err)
	}
	db, err := u.database(ctx)
	if err != nil {
		u.retry(held)
		return err
	}
	cols, ids, skipped, newest := u.columns(prices, uniq, stored)
	dupRows += skipped
	for _, h := range uniq {
		if s, ok := stored[keyOf(&h.batch)]; ok && s.count >= uint64(len(h.batch.Records)) {
			dupBatches++
		}
	}
	if n := len(cols.batchID); n > 0 {
		if err := u.insert(ctx, db, cols); err != nil {
			// ClickHouse 18.16 may have stored the rows and not fed them
			// to the rollup's view; the redelivery will skip them as
			// stored, so only a repair brings the rollup level.
			oldest := slices.Min(cols.ts)
			u.repair.add(time.Unix(oldest, 0), time.Unix(newest+1, 0))
			u.retry(held)
			return fmt.Errorf("insert usage rows: %w", err)
		}
		u.stats.rows.Add(uint64(n))
		u.stats.lagNanos.Store(int64(u.cfg.Clock.Now().Sub(time.Unix(newest, 0))))
	}
	if u.cfg.AfterInsert != nil {
		if err := u.cfg.AfterInsert(ids); err != nil {
			u.log.Debug("usage messages abandoned after insert", "messages", len(held), "err", err)
			return nil
		}
	}
	// A lost ack only costs a redelivery, which the check above skips; so
	// acks are not confirmed by the server.
	for _, h := range held {
		if err := h.msg.Ack(); err != nil {
			u.log.Debug("ack usage message", "err", err)
		}
	}
	u.stats.batches.Add(uint64(len(held)))
	u.stats.dupBatches.Add(dupBatches)
	u.stats.dupRows.Add(dupRows)
	for reason, n := range dropped {
		u.stats.dropped[reason].Add(n)
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

// storedBatch is what gpu_usage already holds of one batch: how many rows,
// and for a batch only partly there, which.
type storedBatch struct {
	count uint64
	rows  map[uint32]bool
}

// storedChunk bounds the ids in one query: ClickHouse limits a query to
// 256 KiB of text by default.
const storedChunk = 1000

// storedRows finds which rows of batches gpu_usage already holds. The query
// names the nodes and the time range the batches cover, which is the
// table's sort key, so ClickHouse reads only the granules those batches
// could be in instead of scanning batch_id across the table.
func (u *Usage) storedRows(ctx context.Context, batches []*heldBatch) (map[batchKey]storedBatch, error) {
	stored := make(map[batchKey]storedBatch)
	for len(batches) > 0 {
		chunk := batches[:min(storedChunk, len(batches))]
		batches = batches[len(chunk):]
		f := newFilter(chunk)
		if len(f.ids) == 0 {
			continue
		}
		rows, err := u.cfg.CH.Query(ctx, `SELECT node, batch_id, count() FROM gpu_usage
			WHERE node IN ? AND ts >= toDateTime(?) AND ts <= toDateTime(?) AND batch_id IN ?
			GROUP BY node, batch_id`, set(f.nodes), f.from, f.to, set(f.ids))
		if err != nil {
			return nil, err
		}
		var partial []string
		for rows.Next() {
			var (
				k batchKey
				n uint64
			)
			if err := rows.Scan(&k.node, &k.id, &n); err != nil {
				rows.Close()
				return nil, err
			}
			want, ok := f.size[k]
			if !ok {
				continue // the same id from a node of another batch here
			}
			stored[k] = storedBatch{count: n}
			switch {
			case n < uint64(want):
				partial = append(partial, k.id)
			case n > uint64(want):
				// Only a batch id reused for other content gets here; its
				// rows are left as they are rather than guessed at.
				u.log.Error("more usage rows stored than the batch holds", "node", k.node, "batch_id", k.id, "stored", n, "records", want)
			}
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return nil, err
		}
		if len(partial) == 0 {
			continue
		}
		rows, err = u.cfg.CH.Query(ctx, `SELECT node, batch_id, row_idx FROM gpu_usage
			WHERE node IN ? AND ts >= toDateTime(?) AND ts <= toDateTime(?) AND batch_id IN ?`, set(f.nodes), f.from, f.to, set(partial))
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			var (
				k   batchKey
				idx uint32
			)
			if err := rows.Scan(&k.node, &k.id, &idx); err != nil {
				rows.Close()
				return nil, err
			}
			s, ok := stored[k]
			if !ok || s.count >= uint64(f.size[k]) {
				continue
			}
			if s.rows == nil {
				s.rows = make(map[uint32]bool)
				stored[k] = s
			}
			s.rows[idx] = true
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return nil, err
		}
	}
	return stored, nil
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

// filter is the primary-key range and the ids of a chunk of batches.
type filter struct {
	nodes    []string
	ids      []string
	from, to int64
	size     map[batchKey]int
}

func newFilter(batches []*heldBatch) filter {
	f := filter{from: math.MaxInt64, size: make(map[batchKey]int, len(batches))}
	nodes := make(map[string]bool)
	for _, h := range batches {
		b := &h.batch
		if len(b.Records) == 0 {
			continue
		}
		f.ids = append(f.ids, b.ID)
		f.size[keyOf(b)] = len(b.Records)
		for _, r := range b.Records {
			if !nodes[r.Node] {
				nodes[r.Node] = true
				f.nodes = append(f.nodes, r.Node)
			}
			f.from = min(f.from, r.Time)
			f.to = max(f.to, r.Time)
		}
	}
	return f
}

// usageColumns are the gpu_usage columns of the rows to insert, in the
// order of insertColumns; a columnar append is several times cheaper than
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

const insertColumns = "INSERT INTO gpu_usage (ts, node, gpu, slice, gpu_type, profile, team, endpoint, model, version, replica, " +
	"util_pct, memory_mb, requests, rate_uusd_per_hour, batch_id, row_idx)"

func (c *usageColumns) list() []any {
	return []any{c.ts, c.node, c.gpu, c.slice, c.gpuType, c.profile, c.team, c.endpoint, c.model, c.version, c.replica,
		c.util, c.memory, c.requests, c.rate, c.batchID, c.rowIdx}
}

// columns prices the rows not yet stored and lays them out by column. It
// returns the ids of the batches with rows to insert, the number of rows
// skipped as stored, and the newest second among the rows.
func (u *Usage) columns(prices Pricer, batches []*heldBatch, stored map[batchKey]storedBatch) (c usageColumns, ids []string, skipped uint64, newest int64) {
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
		s, ok := stored[keyOf(b)]
		if ok && s.count >= uint64(len(b.Records)) {
			skipped += uint64(len(b.Records))
			continue
		}
		added := false
		for i, r := range b.Records {
			idx := h.idx(i)
			if s.rows[idx] {
				skipped++
				continue
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
		}
	}
	u.stats.unpriced.Add(unpriced)
	return c, ids, skipped, newest
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
	batch, err := u.cfg.CH.PrepareBatch(writeContext(ctx, db), insertColumns)
	if err != nil {
		return err
	}
	defer batch.Close()
	for i, col := range c.list() {
		if err := batch.Column(i).Append(col); err != nil {
			return fmt.Errorf("column %d: %w", i, err)
		}
	}
	return batch.Send()
}
