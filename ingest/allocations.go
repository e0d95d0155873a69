package ingest

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/quartz"

	"modelplane/busapi"
)

// Allocation is one interval of an allocation as the control plane recorded
// it: one GPU slot (GPU, Slice) a replica held, or a CPU replica's cores
// (CPUCores > 0). The usage consumer bills a second by the interval that
// covers it and by nothing the agent says about team, endpoint, model,
// version, GPU type or profile.
type Allocation struct {
	// ID identifies the interval: reading it again (closed, say) replaces
	// what was read before.
	ID                                               int64
	Node, Replica                                    string
	GPU, Slice, CPUCores                             int
	Team, Endpoint, Model, Version, GPUType, Profile string
	From                                             time.Time
	// To is when the allocation ended; the zero time while it is held.
	To time.Time
}

// LoadAllocations reads the control plane's allocation intervals. With
// cursor 0 it returns every interval open now or closed after since; with
// the cursor a previous call returned, at least every interval opened or
// closed since that call (more is harmless). It returns the cursor for the
// next call.
type LoadAllocations func(ctx context.Context, cursor int64, since time.Time) (allocs []Allocation, next int64, err error)

// DefaultAllocationHorizon is how long the consumer keeps an ended
// interval: a day more than MP_USAGE keeps a message, so every second the
// stream can still deliver finds its interval.
const DefaultAllocationHorizon = 8 * 24 * time.Hour

// Why a usage row was dropped instead of billed.
const (
	// dropUnallocated: no allocation of the record's replica covers its
	// slot (or, for a CPU replica, its core) at its second.
	dropUnallocated = iota
	// dropForeign: the slot was allocated to another replica at that
	// second (a replica still draining on a slot given to the next, or an
	// agent naming a slot it does not hold for the replica).
	dropForeign
	dropReasons
)

// span is an interval in the consumer's cache, in whole seconds: a record
// of second t is covered when from <= t < to.
type span struct {
	id, from, to int64
	replica      string
	cores        int
	// attribution
	team, endpoint, model, version, gpuType, profile string
}

// slotKey is what an interval is found by: a GPU slot of a node, or a CPU
// replica of a node (whose cores are not numbered by the control plane).
type slotKey struct {
	node       string
	gpu, slice int
	cpuReplica string // "" for a GPU slot
}

// allocCache is the consumer's copy of the allocation intervals of the last
// horizon, kept current by incremental reads.
type allocCache struct {
	load    LoadAllocations
	horizon time.Duration
	clock   quartz.Clock

	loading  sync.Mutex // one read at a time; guards cursor and pruned
	cursor   int64
	pruned   time.Time
	loadedAt atomic.Int64 // Unix ns at which the last successful read began

	mu    sync.RWMutex
	byID  map[int64]*span
	slots map[slotKey][]*span
}

func newAllocCache(load LoadAllocations, horizon time.Duration, clock quartz.Clock) *allocCache {
	return &allocCache{load: load, horizon: horizon, clock: clock, byID: make(map[int64]*span), slots: make(map[slotKey][]*span)}
}

// fresh makes sure the cache reflects every allocation committed before
// since: it reads what changed unless a read that began after since has
// succeeded already.
func (c *allocCache) fresh(ctx context.Context, since time.Time) error {
	c.loading.Lock()
	defer c.loading.Unlock()
	if c.loadedAt.Load() > since.UnixNano() {
		return nil
	}
	start := c.clock.Now()
	allocs, next, err := c.load(ctx, c.cursor, start.Add(-c.horizon))
	if err != nil {
		return err
	}
	c.mu.Lock()
	for _, a := range allocs {
		c.put(a)
	}
	if start.Sub(c.pruned) > time.Minute {
		c.prune(start.Add(-c.horizon).Unix())
		c.pruned = start
	}
	c.mu.Unlock()
	c.cursor = next
	c.loadedAt.Store(start.UnixNano())
	return nil
}

func keyOfAllocation(a Allocation) slotKey {
	if a.CPUCores > 0 {
		return slotKey{node: a.Node, cpuReplica: a.Replica}
	}
	return slotKey{node: a.Node, gpu: a.GPU, slice: a.Slice}
}

// put adds a or updates the interval it names. Callers hold mu.
func (c *allocCache) put(a Allocation) {
	to := int64(math.MaxInt64)
	if !a.To.IsZero() {
		// A second the allocation ended in was still partly held.
		to = a.To.Unix()
		if a.To.Nanosecond() > 0 {
			to++
		}
	}
	if s, ok := c.byID[a.ID]; ok {
		s.to = to
		return
	}
	s := &span{id: a.ID, from: a.From.Unix(), to: to, replica: a.Replica, cores: a.CPUCores,
		team: a.Team, endpoint: a.Endpoint, model: a.Model, version: a.Version, gpuType: a.GPUType, profile: a.Profile}
	c.byID[a.ID] = s
	k := keyOfAllocation(a)
	c.slots[k] = append(c.slots[k], s)
}

// prune forgets intervals that ended before cutoff. Callers hold mu.
func (c *allocCache) prune(cutoff int64) {
	for k, spans := range c.slots {
		kept := spans[:0]
		for _, s := range spans {
			if s.to < cutoff {
				delete(c.byID, s.id)
				continue
			}
			kept = append(kept, s)
		}
		if len(kept) == 0 {
			delete(c.slots, k)
		} else {
			c.slots[k] = kept
		}
	}
}

// lookup finds the interval that bills r. certain is false when the answer
// may change with a fresher cache: nothing was found, or the interval found
// was still open at the last read and r is not older than that read (it
// may have been closed since). Callers hold mu for reading.
func (c *allocCache) lookup(r *busapi.Usage, loadedAt int64) (s *span, reason int, certain bool) {
	reason = dropUnallocated
	if r.GPUType == busapi.CPUType {
		for _, x := range c.slots[slotKey{node: r.Node, cpuReplica: r.Replica}] {
			if x.from <= r.Time && r.Time < x.to && r.GPU == 0 && r.Slice < x.cores {
				return x, 0, x.to != math.MaxInt64 || r.Time < loadedAt
			}
		}
		return nil, reason, false
	}
	for _, x := range c.slots[slotKey{node: r.Node, gpu: r.GPU, slice: r.Slice}] {
		if x.from <= r.Time && r.Time < x.to {
			if x.replica == r.Replica {
				return x, 0, x.to != math.MaxInt64 || r.Time < loadedAt
			}
			reason = dropForeign
		}
	}
	return nil, reason, false
}

// attribute rewrites each record of batches with its interval's team,
// endpoint, model, version, GPU type and profile, and removes the records
// no interval covers, keeping their original indexes in rowIdx. It reads
// the allocations again first when a decision depends on it. It returns
// the rows dropped, by reason.
func (u *Usage) attribute(ctx context.Context, batches []*heldBatch) (dropped [dropReasons]uint64, err error) {
	c := u.allocs
	var newest time.Time
	for _, h := range batches {
		if h.received.After(newest) {
			newest = h.received
		}
	}
	// Reading first is one small query; deciding first whether the cache
	// settles everything would cost a second lookup of every row, which
	// bench ingest measured at several percent of the consumer. The check
	// is kept for when PostgreSQL does not answer.
	if loadedAt := c.loadedAt.Load(); loadedAt <= newest.UnixNano() {
		if err := c.fresh(ctx, newest); err != nil && !u.decided(batches, loadedAt) {
			return dropped, err
		}
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	for _, h := range batches {
		recs := h.batch.Records
		kept := recs[:0]
		var idx []uint32
		for i := range recs {
			r := &recs[i]
			s, reason, _ := c.lookup(r, 0)
			if s == nil {
				dropped[reason]++
				if idx == nil {
					idx = make([]uint32, i, len(recs))
					for j := range i {
						idx[j] = uint32(j)
					}
				}
				continue
			}
			r.Team, r.Endpoint, r.Model, r.Version, r.GPUType, r.Profile = s.team, s.endpoint, s.model, s.version, s.gpuType, s.profile
			if idx != nil {
				kept = append(kept, *r)
				idx = append(idx, uint32(i))
			} else {
				kept = kept[:i+1] // nothing dropped yet: r is in place
			}
		}
		h.batch.Records = kept
		h.rowIdx = idx
	}
	return dropped, nil
}

// decided reports whether the cache as read at loadedAt (Unix ns) settles
// every record of batches.
func (u *Usage) decided(batches []*heldBatch, loadedAt int64) bool {
	c := u.allocs
	c.mu.RLock()
	defer c.mu.RUnlock()
	sec := loadedAt / int64(time.Second)
	for _, h := range batches {
		for i := range h.batch.Records {
			if _, _, certain := c.lookup(&h.batch.Records[i], sec); !certain {
				return false
			}
		}
	}
	return true
}
