package agent

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"modelplane/busapi"
)

const (
	// meterOffset places each meter tick just after a second boundary, so
	// the second it records has ended.
	meterOffset = 20 * time.Millisecond
	// maxCatchUp bounds the seconds one late tick fills in. A tick is late
	// when an ack wait or a slow disk held the meter; a gap longer than
	// this means the process was suspended, and its replicas with it.
	maxCatchUp = 60
)

// BatchID is the deterministic id, and Nats-Msg-Id, of a node's chunk-th
// usage batch of second sec: the same batch built twice (by a replay, or a
// restarted agent metering the same second) carries the same id, so
// JetStream drops the copy inside its duplicate window and the ingest side
// after it.
func BatchID(node string, sec int64, chunk int) string {
	return node + "/" + strconv.FormatInt(sec, 10) + "/" + strconv.Itoa(chunk)
}

// meterLoop records every allocated slot every second. Before anything new
// it replays what a previous process left in the spool.
func (a *Agent) meterLoop(ctx context.Context) {
	defer a.wg.Done()
	a.drain(ctx)
	t := a.cfg.Clock.NewTimer(time.Hour, "agent", "meter")
	defer t.Stop()
	for {
		now := a.cfg.Clock.Now()
		t.Reset(now.Truncate(time.Second).Add(time.Second+meterOffset).Sub(now), "agent", "meter")
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		a.meterTick(ctx, a.cfg.Clock.Now())
	}
}

// meterTick records the seconds that ended since the last tick, writes
// their batches to the spool and publishes what the spool holds.
func (a *Agent) meterTick(ctx context.Context, now time.Time) {
	cur := now.Unix() - 1
	if a.lastSec == 0 {
		a.lastSec = cur - 1
	}
	if cur <= a.lastSec {
		return // the clock stepped back, or two ticks in one second
	}
	first := max(a.lastSec+1, cur-maxCatchUp+1)
	a.lastSec = cur

	alloc := a.allocations(ctx)
	for sec := first; sec <= cur; sec++ {
		recs := make([]busapi.Usage, len(alloc))
		for i, u := range alloc {
			u.Time = sec
			if sec != cur {
				u.Requests = 0 // requests since the last tick count in its last second
			}
			recs[i] = u
		}
		a.spoolSecond(sec, recs)
	}
	a.drain(ctx)
}

// allocations observes every replica and returns one record per slot of
// every replica that holds slots on this node, and one per core of every
// CPU replica, Time unset. A slot is
// billed while the desired state gives it to a replica, whether the
// replica serves, loads or failed: the GPU is reserved for that team all
// the same. Records come sorted by GPU, slice and replica, so chunks are
// the same for the same set.
func (a *Agent) allocations(ctx context.Context) []busapi.Usage {
	a.mu.Lock()
	var todo []*managed
	for _, m := range a.replicas {
		if m.valid && m.rep != nil {
			todo = append(todo, m)
		}
	}
	a.mu.Unlock()
	changed := false
	for _, m := range todo {
		if a.observe(ctx, m) {
			changed = true
		}
	}
	if changed {
		a.poke() // report readiness at once
	}

	a.mu.Lock()
	defer a.mu.Unlock()
	var out []busapi.Usage
	_, pool := a.drv.(PoolDriver)
	for _, m := range a.replicas {
		if !m.valid || pool && (m.rep == nil || m.obs.Unallocated) {
			continue
		}
		var util float64
		var mem int64
		var requests uint64
		if m.rep != nil {
			util, mem = m.obs.UtilPct, m.obs.MemoryMB
			switch {
			case !m.metered:
				// Adopted: the count before this run was metered by the
				// previous one.
				m.metered = true
			case m.obs.Requests >= m.lastRequests:
				requests = m.obs.Requests - m.lastRequests
			default:
				requests = m.obs.Requests // the replica restarted its count
			}
			m.lastRequests = m.obs.Requests
		}
		if isCPU(m.spec) {
			// One record per allocated core: a core-second is the unit
			// the cpu-core rate prices, as a slot-second is a GPU's.
			for i := range m.spec.CPUCores {
				u := busapi.Usage{
					Node: a.cfg.Node, Slice: i, GPUType: busapi.CPUType, Profile: busapi.ProfileCPU,
					Team: m.spec.Team, Endpoint: m.spec.Endpoint, Model: m.spec.Model, Version: m.spec.Version, Replica: m.spec.ID,
					UtilPct: util, MemoryMB: slotShare(mem, m.spec.CPUCores, i),
				}
				if i == 0 {
					u.Requests = int64(requests)
				}
				out = append(out, u)
			}
			continue
		}
		for i, s := range m.spec.Slots {
			typ := m.spec.GPUType
			if s.GPU < len(a.cfg.GPUs) {
				typ = a.cfg.GPUs[s.GPU].Type
			}
			u := busapi.Usage{
				Node:     a.cfg.Node,
				GPU:      s.GPU,
				Slice:    s.Slice,
				GPUType:  typ,
				Profile:  m.spec.Profile,
				Team:     m.spec.Team,
				Endpoint: m.spec.Endpoint,
				Model:    m.spec.Model,
				Version:  m.spec.Version,
				Replica:  m.spec.ID,
				UtilPct:  util,
				MemoryMB: slotShare(mem, len(m.spec.Slots), i),
			}
			if i == 0 {
				// A request is served once however many GPUs serve it; the
				// first slot carries it so sums per endpoint stay exact.
				u.Requests = int64(requests)
			}
			out = append(out, u)
		}
	}
	slices.SortFunc(out, func(x, y busapi.Usage) int {
		return cmp.Or(cmp.Compare(x.GPU, y.GPU), cmp.Compare(x.Slice, y.Slice), cmp.Compare(x.Replica, y.Replica))
	})
	return out
}

// spoolSecond writes one second's records to the spool in chunks. While
// NATS is away a batch is fsynced at once: it will wait there.
func (a *Agent) spoolSecond(sec int64, recs []busapi.Usage) {
	a.spoolBatches(sec, recs, !a.nc.IsConnected())
}

func (a *Agent) spoolBatches(sec int64, recs []busapi.Usage, durable bool) {
	for chunk := 0; chunk*a.cfg.BatchRecords < len(recs); chunk++ {
		part := recs[chunk*a.cfg.BatchRecords : min((chunk+1)*a.cfg.BatchRecords, len(recs))]
		b := busapi.UsageBatch{ID: BatchID(a.cfg.Node, sec, chunk), Node: a.cfg.Node, Records: part}
		err := a.spool.append(b.ID, busapi.AppendUsageBatch(nil, &b), durable)
		a.n.batches.Add(1)
		a.n.records.Add(uint64(len(part)))
		if err != nil {
			a.n.batchesDropped.Add(1)
			a.n.recordsDropped.Add(uint64(len(part)))
			a.log.Error("usage batch dropped", slog.String("batch", b.ID), slog.Int("records", len(part)),
				slog.Int64("spool_bytes", a.spool.size.Load()), slog.String("error", err.Error()))
		}
	}
}

// drain publishes the spool in order, up to MaxInFlight batches awaiting
// their acks at a time, and removes each batch once acknowledged. It stops
// at the first batch that gets no ack and leaves the rest, fsynced, for
// the next tick.
func (a *Agent) drain(ctx context.Context) {
	sp := a.spool
	for sp.len() > 0 && ctx.Err() == nil {
		if !a.nc.IsConnected() {
			a.holdSpool(errors.New("nats is not connected"))
			return
		}
		if err := a.publishWindow(ctx, sp.head(a.cfg.MaxInFlight)); err != nil {
			if ctx.Err() != nil {
				_ = sp.syncAll() // stopping: what waits is for the next run
				return
			}
			a.holdSpool(err)
			return
		}
	}
	if sp.len() == 0 && a.backlog {
		a.backlog = false
		a.log.Info("usage spool replayed")
	}
}

// holdSpool makes the waiting batches durable and says so once per outage.
func (a *Agent) holdSpool(cause error) {
	if err := a.spool.syncAll(); err != nil {
		a.log.Error("usage spool not synced", slog.String("error", err.Error()))
	}
	if !a.backlog {
		a.backlog = true
		a.log.Warn("usage batches wait in the spool until JetStream acknowledges them",
			slog.Int("batches", a.spool.len()), slog.String("error", cause.Error()))
	}
}

// publishWindow publishes the given spool entries asynchronously and waits
// for their acks. An error means at least one got none.
func (a *Agent) publishWindow(ctx context.Context, window []spoolEntry) error {
	type pending struct {
		seq uint64
		f   jetstream.PubAckFuture
	}
	var ps []pending
	var failure error
	for _, e := range window {
		data, id, err := a.spool.read(e)
		if err != nil {
			a.n.batchesDropped.Add(1)
			a.log.Error("unreadable usage batch set aside", slog.String("error", err.Error()))
			a.spool.quarantine(e.seq)
			continue
		}
		msg := &nats.Msg{Subject: a.usageSubject, Data: data, Header: nats.Header{}}
		f, err := a.js.PublishMsgAsync(msg, jetstream.WithMsgID(id))
		if err != nil {
			failure = fmt.Errorf("publish %s: %w", id, err)
			a.n.pubFails.Add(1)
			break
		}
		ps = append(ps, pending{e.seq, f})
	}
	timeout := time.NewTimer(a.cfg.AckTimeout)
	defer timeout.Stop()
	expired := false
	for _, p := range ps {
		if expired {
			// Take what has arrived; the rest stays for the replay.
			select {
			case ack := <-p.f.Ok():
				a.acked(p.seq, ack)
			default:
				a.n.pubFails.Add(1)
			}
			continue
		}
		select {
		case ack := <-p.f.Ok():
			a.acked(p.seq, ack)
		case err := <-p.f.Err():
			a.n.pubFails.Add(1)
			failure = cmp.Or(failure, fmt.Errorf("usage batch ack: %w", err))
		case <-timeout.C:
			expired = true
			a.n.pubFails.Add(1)
			failure = cmp.Or(failure, errors.New("usage batch ack timed out"))
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return failure
}

func (a *Agent) acked(seq uint64, ack *jetstream.PubAck) {
	a.n.acked.Add(1)
	if ack != nil && ack.Duplicate {
		a.n.duplicate.Add(1)
	}
	if err := a.spool.remove(seq); err != nil {
		a.log.Error("acknowledged usage batch not removed from the spool; it will be replayed and deduplicated", slog.String("error", err.Error()))
	}
}
