package ingest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"modelplane/bus"
	"modelplane/busapi"
	"modelplane/ingest"
	"modelplane/internal/chtest"
	"modelplane/internal/kubetest"
	"modelplane/internal/natstest"
	"modelplane/internal/pgtest"
	"modelplane/internal/wait"
)

func TestMain(m *testing.M) {
	code := m.Run()
	chtest.Stop()
	pgtest.Stop()
	kubetest.StopShared(code)
	os.Exit(code)
}

// testRates prices by profile alone; the ledger expects the same prices.
type testRates map[string]int64

func (r testRates) At(_, profile string, _ time.Time) (int64, bool) {
	v, ok := r[profile]
	return v, ok
}

var rates = testRates{busapi.ProfileFull: 3_500_000, "mig-1g.10gb": 500_000, "mig-3g.40gb": 1_750_000}

func loadTestRates(context.Context) (ingest.Pricer, error) { return rates, nil }

// baseTime is the first simulated second; a fixed day keeps partitions few.
var baseTime = time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC).Unix()

// nodeSecond is one agent's batch for one second: gpus GPUs, the even ones
// whole and busy, the odd ones split into a 3g.40gb slice serving and a
// 1g.10gb slice allocated but idle (billed all the same).
func nodeSecond(node string, sec int64, gpus int) busapi.UsageBatch {
	t := baseTime + sec
	b := busapi.UsageBatch{ID: fmt.Sprintf("%s-%d-0", node, t), Node: node}
	for g := range gpus {
		rec := busapi.Usage{Time: t, Node: node, GPU: g, GPUType: "A100-80GB", Team: "risk", Endpoint: "fraud", Model: "fraud-xgb", Version: "v3"}
		if g%2 == 0 {
			rec.Profile, rec.Replica = busapi.ProfileFull, fmt.Sprintf("%s-r%d", node, g)
			rec.UtilPct, rec.MemoryMB, rec.Requests = 61.5, 20_000, (t*31+int64(g)*7)%50
			b.Records = append(b.Records, rec)
			continue
		}
		rec.Profile, rec.Slice, rec.Replica = "mig-3g.40gb", 0, fmt.Sprintf("%s-r%d-0", node, g)
		rec.UtilPct, rec.MemoryMB, rec.Requests = 40, 9_000, (t*17+int64(g))%20
		b.Records = append(b.Records, rec)
		idle := busapi.Usage{Time: t, Node: node, GPU: g, Slice: 1, GPUType: "A100-80GB", Profile: "mig-1g.10gb"}
		b.Records = append(b.Records, idle)
	}
	return b
}

type rowKey struct {
	batch string
	idx   uint32
}

type rowWant struct {
	requests, rate uint64
	slot           slotKey
}

// slotKey is a slot-second, which the ledger bills once whatever batches
// name it.
type slotKey struct {
	node, replica string
	gpu, slice    int
	ts            int64
}

// ledger is the exactly-once bookkeeping of a test: every row attempted
// (handed to JetStream), every row whose publish JetStream acknowledged,
// checked against what ClickHouse stored, which is one row per slot-second
// attempted.
// It is also the control plane's record of allocations for the consumer
// (loadAllocations): a synthetic fleet is never placed, so each slot a
// record meters is taken as allocated, from the epoch on, to the replica
// and labels of the first record that names it. The attribution tests
// (attribution_test.go) place real replicas in PostgreSQL instead.
type ledger struct {
	mu        sync.Mutex
	attempted map[rowKey]rowWant
	acked     map[rowKey]bool
	slots     map[allocKey]bool
	allocs    []ingest.Allocation
}

type allocKey struct {
	node, replica string
	gpu, slice    int
}

func newLedger() *ledger {
	return &ledger{attempted: make(map[rowKey]rowWant), acked: make(map[rowKey]bool), slots: make(map[allocKey]bool)}
}

func (l *ledger) attempt(b busapi.UsageBatch) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, r := range b.Records {
		rate, _ := rates.At(r.GPUType, r.Profile, time.Unix(r.Time, 0))
		l.attempted[rowKey{b.ID, uint32(i)}] = rowWant{requests: uint64(r.Requests), rate: uint64(rate),
			slot: slotKey{node: r.Node, replica: r.Replica, gpu: r.GPU, slice: r.Slice, ts: r.Time}}
		k := allocKey{node: r.Node, replica: r.Replica, gpu: r.GPU, slice: r.Slice}
		a := ingest.Allocation{Node: r.Node, Replica: r.Replica, GPU: r.GPU, Slice: r.Slice, Team: r.Team, Endpoint: r.Endpoint,
			Model: r.Model, Version: r.Version, GPUType: r.GPUType, Profile: r.Profile, From: time.Unix(0, 0)}
		if r.GPUType == busapi.CPUType {
			// A CPU replica is one interval holding every core it meters.
			k.gpu, k.slice, a.GPU, a.Slice, a.CPUCores = 0, 0, 0, 0, 1<<16
		}
		if !l.slots[k] {
			l.slots[k] = true
			a.ID = int64(len(l.allocs) + 1)
			l.allocs = append(l.allocs, a)
		}
	}
}

// loadAllocations is the consumer's ingest.LoadAllocations over the
// ledger's slots; the cursor is how many it has read.
func (l *ledger) loadAllocations(_ context.Context, cursor int64, _ time.Time) ([]ingest.Allocation, int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.allocs[cursor:]), int64(len(l.allocs)), nil
}

func (l *ledger) ack(b busapi.UsageBatch) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := range b.Records {
		l.acked[rowKey{b.ID, uint32(i)}] = true
	}
}

func (l *ledger) rows() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.attempted)
}

// check asserts that every attempted row was acknowledged, that ClickHouse
// holds exactly one row of each acknowledged slot-second, one of the rows
// published for it, and nothing else, that request and cost totals are
// those of the rows stored, and that the hourly rollup adds up to the raw
// table.
func (l *ledger) check(t *testing.T, ch driver.Conn) {
	t.Helper()
	ctx := context.Background()
	l.mu.Lock()
	defer l.mu.Unlock()
	rows, err := ch.Query(ctx, "SELECT batch_id, row_idx, node, replica, gpu, slice, toUInt32(ts) FROM gpu_usage")
	if err != nil {
		t.Fatal(err)
	}
	stored := make(map[rowKey]uint64)
	storedSlots := make(map[slotKey]uint64)
	for rows.Next() {
		var (
			k          rowKey
			s          slotKey
			gpu, slice uint16
			ts         uint32
		)
		if err := rows.Scan(&k.batch, &k.idx, &s.node, &s.replica, &gpu, &slice, &ts); err != nil {
			t.Fatal(err)
		}
		s.gpu, s.slice, s.ts = int(gpu), int(slice), int64(ts)
		stored[k]++
		storedSlots[s]++
	}
	rows.Close()
	var lost, duplicated, unknown, unacked int
	var wantRequests, wantCost uint64
	slots := make(map[slotKey]bool)
	for k, w := range l.attempted {
		if !l.acked[k] {
			unacked++
		}
		if l.acked[k] {
			slots[w.slot] = true
		}
		if n := stored[k]; n > 0 {
			wantRequests += w.requests
			wantCost += w.rate
		}
	}
	for s := range slots {
		if storedSlots[s] == 0 {
			lost++
		}
	}
	for s, n := range storedSlots {
		if n > 1 {
			duplicated += int(n - 1)
		}
		if !slots[s] {
			unknown++
		}
	}
	for k := range stored {
		if _, ok := l.attempted[k]; !ok {
			unknown++
		}
	}
	t.Logf("ledger: %d rows attempted, %d acked by JetStream, %d slot-seconds, %d stored", len(l.attempted), len(l.acked), len(slots), len(stored))
	if lost != 0 || duplicated != 0 || unknown != 0 || unacked != 0 {
		t.Errorf("slot-seconds lost %d, billed twice %d, stored but never published %d; rows never acked %d; want all 0", lost, duplicated, unknown, unacked)
	}
	var rawRows, rawRequests, rawCost uint64
	if err := ch.QueryRow(ctx, "SELECT count(), sum(requests), sum(rate_uusd_per_hour) FROM gpu_usage").Scan(&rawRows, &rawRequests, &rawCost); err != nil {
		t.Fatal(err)
	}
	if rawRows != uint64(len(slots)) || rawRequests != wantRequests || rawCost != wantCost {
		t.Errorf("gpu_usage: %d rows, %d requests, %d µUSD×3600; want %d, %d, %d", rawRows, rawRequests, rawCost, len(slots), wantRequests, wantCost)
	}
	// Merges of the rollup are eventual: sum what is there, never read one row.
	var hSeconds, hCost, hRequests uint64
	if err := ch.QueryRow(ctx, "SELECT sum(gpu_seconds), sum(cost_uusd_x3600), sum(requests) FROM gpu_usage_hourly").Scan(&hSeconds, &hCost, &hRequests); err != nil {
		t.Fatal(err)
	}
	if hSeconds != rawRows || hCost != rawCost || hRequests != rawRequests {
		t.Errorf("hourly rollup: %d GPU-seconds, %d µUSD×3600, %d requests; raw table %d, %d, %d", hSeconds, hCost, hRequests, rawRows, rawCost, rawRequests)
	}
}

// env is one test's NATS server, ClickHouse database and publishing
// connection.
type env struct {
	url string // NATS client URL
	nc  *nats.Conn
	js  jetstream.JetStream
	ch  driver.Conn
	l   *ledger
}

// newEnv starts NATS with the contract's streams (or, when dupWindow is
// set, MP_USAGE with that duplicate window) and a fresh ClickHouse database.
func newEnv(t *testing.T, ch driver.Conn, dupWindow time.Duration) *env {
	t.Helper()
	srv := natsServer(t)
	nc, err := nats.Connect(srv, natstest.ControlPlane(t)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := bus.Ensure(ctx, js); err != nil {
		t.Fatal(err)
	}
	if dupWindow > 0 {
		cfg := jetstream.StreamConfig{Name: busapi.StreamUsage, Subjects: []string{"mp.usage.>"}, Storage: jetstream.FileStorage, Duplicates: dupWindow}
		if _, err := js.UpdateStream(ctx, cfg); err != nil {
			t.Fatal(err)
		}
	}
	if ch == nil {
		ch = chtest.New(t)
	}
	return &env{url: srv, nc: nc, js: js, ch: ch, l: newLedger()}
}

// publish publishes b with its id as Nats-Msg-Id and records the outcome.
func (e *env) publish(t *testing.T, js jetstream.JetStream, b busapi.UsageBatch) *jetstream.PubAck {
	t.Helper()
	data := busapi.AppendUsageBatch(nil, &b)
	e.l.attempt(b)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ack, err := js.Publish(ctx, busapi.UsageSubject(b.Node), data, jetstream.WithMsgID(b.ID))
	if err != nil {
		t.Fatalf("publish %s: %v", b.ID, err)
	}
	e.l.ack(b)
	return ack
}

// encodeBatch is the i-th of batches published at once: binary, as agents
// send it, but every third as JSON, as agents of earlier versions send
// it, so that every test publishing many batches stores both forms side by
// side, as during an upgrade.
func encodeBatch(b busapi.UsageBatch, i int) ([]byte, error) {
	if i%3 == 2 {
		return json.Marshal(b)
	}
	return busapi.AppendUsageBatch(nil, &b), nil
}

// publishAsync publishes batches without waiting for each ack, as agents
// do, and waits for all acks at the end.
func (e *env) publishAsync(t *testing.T, js jetstream.JetStream, batches []busapi.UsageBatch) {
	t.Helper()
	if err := e.publishAll(js, batches); err != nil {
		t.Fatal(err)
	}
}

// publishAll is publishAsync for goroutines other than the test's.
func (e *env) publishAll(js jetstream.JetStream, batches []busapi.UsageBatch) error {
	futures := make([]jetstream.PubAckFuture, len(batches))
	for i, b := range batches {
		data, err := encodeBatch(b, i)
		if err != nil {
			return err
		}
		e.l.attempt(b)
		if futures[i], err = js.PublishAsync(busapi.UsageSubject(b.Node), data, jetstream.WithMsgID(b.ID)); err != nil {
			return fmt.Errorf("publish %s: %w", b.ID, err)
		}
	}
	for i, f := range futures {
		select {
		case <-f.Ok():
			e.l.ack(batches[i])
		case err := <-f.Err():
			return fmt.Errorf("publish %s: %w", batches[i].ID, err)
		case <-time.After(30 * time.Second):
			return fmt.Errorf("publish %s: no ack", batches[i].ID)
		}
	}
	return nil
}

// publishLoad publishes one second of nodes×gpus every tick, as a fleet
// does, until stop is closed; it returns the first publish error.
func (e *env) publishLoad(js jetstream.JetStream, nodes, gpus int, tick time.Duration, stop <-chan struct{}) <-chan error {
	done := make(chan error, 1)
	go func() {
		t := time.NewTicker(tick)
		defer t.Stop()
		for sec := int64(0); ; sec++ {
			select {
			case <-stop:
				done <- nil
				return
			case <-t.C:
			}
			batches := make([]busapi.UsageBatch, nodes)
			for n := range batches {
				batches[n] = nodeSecond(fmt.Sprintf("load-%d", n), sec, gpus)
			}
			if err := e.publishAll(js, batches); err != nil {
				done <- err
				return
			}
		}
	}()
	return done
}

// usageConfig is the consumer setup of the tests: small batches and quick
// retries so that the failure paths run often in a short test.
func (e *env) usageConfig(t *testing.T, js jetstream.JetStream) ingest.UsageConfig {
	return ingest.UsageConfig{
		JS: js, CH: e.ch, LoadRates: loadTestRates, LoadAllocations: e.l.loadAllocations, Log: testLog(t),
		BatchRows: 2_000, FlushInterval: 50 * time.Millisecond, AckWait: 5 * time.Second,
		NakDelay: 100 * time.Millisecond, MaxNakDelay: time.Second, Timeout: 5 * time.Second,
	}
}

func (e *env) start(t *testing.T, cfg ingest.UsageConfig) *ingest.Usage {
	t.Helper()
	u, err := ingest.NewUsage(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := u.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(u.Stop)
	return u
}

// waitDrained waits until the consumer has acked every message in the
// stream: acks follow inserts, so everything acknowledged is then stored.
// It compares the ack floor with the stream's last sequence, since the
// consumer's pending count can lag a publish that just returned.
func (e *env) waitDrained(t *testing.T, durable string, within time.Duration) {
	t.Helper()
	if durable == "" {
		durable = "ingest-usage"
	}
	ctx := context.Background()
	var (
		last uint64
		info *jetstream.ConsumerInfo
		err  error
	)
	wait.Eventually(t, within, func() bool {
		info = nil
		var s jetstream.Stream
		if s, err = e.js.Stream(ctx, busapi.StreamUsage); err == nil {
			var si *jetstream.StreamInfo
			if si, err = s.Info(ctx); err == nil {
				last = si.State.LastSeq
				var cons jetstream.Consumer
				if cons, err = s.Consumer(ctx, durable); err == nil {
					info, err = cons.Info(ctx)
				}
			}
		}
		return err == nil && info.AckFloor.Stream >= last && info.NumAckPending == 0 && info.NumPending == 0
	}, "consumer not drained: %v", wait.Show(func() any { return fmt.Sprintf("stream last seq %d, consumer %+v, %v", last, info, err) }))
}

func testLog(t *testing.T) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})).With("test", t.Name())
	}
	return slog.New(slog.DiscardHandler)
}
