package ingest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"modelplane/busapi"
)

// knownWindow is how far back, from the first store after Start, the
// consumer reads what gpu_usage holds per node. A row older than that is
// always looked up in gpu_usage; a row newer needs a lookup only when the
// consumer's memory cannot rule out that it is stored. An hour covers
// every live second and the replay of a short outage, and reading an hour
// of the sort key's first two columns is cheap.
const knownWindow = time.Hour

// knownSlotsMax bounds the slots a consumer remembers. Past it the memory
// is folded into per-node floors (forget), which costs lookups of late
// rows only: live rows stay above the floors.
const knownSlotsMax = 1 << 18

// slotID is a slot of a slotSecond: the second left out.
type slotID struct {
	node, replica string
	gpu, slice    uint16
}

// ledgerMemory is what a Usage knows, for one run from Start to Stop, of
// which slot-seconds gpu_usage may hold, so that rows it can rule out are
// never looked up (package comment, docs/security.md). It answers "may be
// stored" for every row gpu_usage holds; it may also answer it for a row
// that is not (a lookup then says no), never the other way round.
//
// At the first store of a run it reads, per node, the newest second
// gpu_usage holds of the last knownWindow: every row stored before the run
// lies at or below its node's floor (base for a node without one), as
// the lease makes this run the only writer from then on. Every row the
// run inserts, or tries to, raises its slot's top first. So a row above
// both its node's floor and its slot's top is stored nowhere, and only
// the others are looked up. Rows arrive per slot in time order but for
// an agent's replays, so live rows always clear both.
type ledgerMemory struct {
	mu     sync.Mutex
	loaded bool
	// base is the floor of every node: seconds at or below it were not
	// read at load and are always looked up.
	base  int64
	floor map[string]int64
	top   map[slotID]int64
	// limit is the most slots top holds (knownSlotsMax).
	limit int
}

// reset forgets everything: a new run (a new lease) starts from what
// gpu_usage holds, not from what an earlier run stored.
func (m *ledgerMemory) reset() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.loaded, m.base, m.floor, m.top = false, 0, nil, nil
}

// load reads the floors once per run, before the run's first insert.
func (m *ledgerMemory) load(ctx context.Context, ch driver.Conn, now time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.loaded {
		return nil
	}
	from := now.Add(-knownWindow).Unix()
	rows, err := ch.Query(ctx, "SELECT node, toUInt32(max(ts)) FROM gpu_usage WHERE ts >= toDateTime(?) GROUP BY node", from)
	if err != nil {
		return fmt.Errorf("newest stored usage seconds: %w", err)
	}
	defer rows.Close()
	floor := make(map[string]int64)
	for rows.Next() {
		var (
			node string
			ts   uint32
		)
		if err := rows.Scan(&node, &ts); err != nil {
			return fmt.Errorf("newest stored usage seconds: %w", err)
		}
		floor[node] = int64(ts)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("newest stored usage seconds: %w", err)
	}
	m.loaded, m.base, m.floor, m.top, m.limit = true, from-1, floor, make(map[slotID]int64), knownSlotsMax
	return nil
}

// lookups returns, per node, the seconds of the rows of batches that may
// be stored already, which the caller looks up in gpu_usage. Every row of
// a redelivered message is looked up: a run that died, in this process or
// another, may have stored it after this run's floors were read.
func (m *ledgerMemory) lookups(batches []*heldBatch) (secs map[string][]int64, n int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	secs = make(map[string][]int64)
	for _, h := range batches {
		for i := range h.batch.Records {
			r := &h.batch.Records[i]
			if h.redelivered || m.mayBeStored(r) {
				secs[r.Node] = append(secs[r.Node], r.Time)
				n++
			}
		}
	}
	return secs, n
}

// mayBeStored is false only for a row gpu_usage certainly does not hold.
// Callers hold mu.
func (m *ledgerMemory) mayBeStored(r *busapi.Usage) bool {
	floor := m.base
	if f, ok := m.floor[r.Node]; ok {
		floor = max(floor, f)
	}
	if r.Time <= floor {
		return true
	}
	top, ok := m.top[slotID{node: r.Node, replica: r.Replica, gpu: uint16(r.GPU), slice: uint16(r.Slice)}]
	return ok && r.Time <= top
}

// note records the slot-seconds of stored, which columns filled with the
// rows found in gpu_usage and those about to be inserted, before the
// insert: an insert that fails may still have stored some of them.
func (m *ledgerMemory) note(stored map[slotSecond]rowID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for s := range stored {
		k := slotID{node: s.node, replica: s.replica, gpu: s.gpu, slice: s.slice}
		top, ok := m.top[k]
		if !ok {
			if len(m.top) >= m.limit {
				m.forget()
			}
			// The strings come from a decoded message; the memory
			// outlives it.
			k.node, k.replica = strings.Clone(k.node), strings.Clone(k.replica)
		}
		if !ok || s.ts > top {
			m.top[k] = s.ts
		}
	}
}

// forget folds every slot's top into its node's floor and drops the slots.
// Callers hold mu.
func (m *ledgerMemory) forget() {
	for k, top := range m.top {
		if top > m.floor[k.node] {
			m.floor[k.node] = top
		}
	}
	clear(m.top)
}
