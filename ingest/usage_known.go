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

// replicaSlot is a slot of one node: a slotSecond without its node and
// second.
type replicaSlot struct {
	replica    string
	gpu, slice uint16
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
// run sees raises its slot's top before it is stored. So a row above
// both its node's floor and its slot's top is stored nowhere, and only
// the others are looked up. Rows arrive per slot in time order but for
// an agent's replays, so live rows always clear both.
type ledgerMemory struct {
	mu     sync.Mutex
	loaded bool
	// base is the floor of every node: seconds at or below it were not
	// read at load and are always looked up.
	base  int64
	nodes map[string]*nodeMemory
	// slots is how many slots the nodes hold together, at most limit
	// (knownSlotsMax) between sets.
	slots, limit int
}

// nodeMemory is what a run knows of one node.
type nodeMemory struct {
	floor int64
	top   map[replicaSlot]*int64
}

// reset forgets everything: a new run (a new lease) starts from what
// gpu_usage holds, not from what an earlier run stored.
func (m *ledgerMemory) reset() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.loaded, m.base, m.nodes, m.slots = false, 0, nil, 0
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
	from--
	nodes := make(map[string]*nodeMemory)
	for rows.Next() {
		var (
			node string
			ts   uint32
		)
		if err := rows.Scan(&node, &ts); err != nil {
			return fmt.Errorf("newest stored usage seconds: %w", err)
		}
		nodes[node] = &nodeMemory{floor: max(int64(ts), from), top: make(map[replicaSlot]*int64)}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("newest stored usage seconds: %w", err)
	}
	m.loaded, m.base, m.nodes, m.slots, m.limit = true, from, nodes, 0, knownSlotsMax
	return nil
}

// classify notes every row of batches and returns, per node, the seconds
// of those gpu_usage may hold already, which the caller looks up, and how
// many there are. The others are fresh: stored nowhere, and each the first
// of its slot-second among batches, since every row raises its slot's top
// before it is stored. So when n is 0 the rows of batches are distinct
// slot-seconds that gpu_usage lacks, and nothing needs comparing. Every row
// of a redelivered message is looked up: a run that died, in this process
// or another, may have stored it after this run's floors were read.
func (m *ledgerMemory) classify(batches []*heldBatch) (secs map[string][]int64, n int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, h := range batches {
		if len(h.batch.Records) == 0 {
			continue
		}
		node := m.node(h.batch.Node) // every record's (checkBatch)
		for i := range h.batch.Records {
			r := &h.batch.Records[i]
			if fresh := m.note(node, r); !fresh || h.redelivered {
				if secs == nil {
					secs = make(map[string][]int64)
				}
				secs[r.Node] = append(secs[r.Node], r.Time)
				n++
			}
		}
	}
	// Forgotten after the set, not within it: folding the set's own
	// seconds into the floors would have its later live rows looked up.
	if m.slots > m.limit {
		m.forget()
	}
	return secs, n
}

// node returns the memory of the node of that name, made at the floor
// base when the load found no row of it. Callers hold mu.
func (m *ledgerMemory) node(name string) *nodeMemory {
	node := m.nodes[name]
	if node == nil {
		// The name comes from a decoded message; the memory outlives it.
		node = &nodeMemory{floor: m.base, top: make(map[replicaSlot]*int64)}
		m.nodes[strings.Clone(name)] = node
	}
	return node
}

// note raises r's slot's top to r's second and reports whether r was
// fresh: above its node's floor and its slot's top before. Callers hold mu.
func (m *ledgerMemory) note(node *nodeMemory, r *busapi.Usage) (fresh bool) {
	if r.Time <= node.floor {
		return false
	}
	k := replicaSlot{replica: r.Replica, gpu: uint16(r.GPU), slice: uint16(r.Slice)}
	if top := node.top[k]; top != nil {
		fresh = r.Time > *top
		*top = max(*top, r.Time)
		return fresh
	}
	k.replica = strings.Clone(k.replica)
	top := r.Time
	node.top[k] = &top
	m.slots++
	return true
}

// forget folds every slot's top into its node's floor and drops the slots.
// Callers hold mu.
func (m *ledgerMemory) forget() {
	for _, node := range m.nodes {
		for _, top := range node.top {
			node.floor = max(node.floor, *top)
		}
		clear(node.top)
	}
	m.slots = 0
}
