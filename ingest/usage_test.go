package ingest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"modelplane/billing"
	"modelplane/busapi"
	"modelplane/db"
	"modelplane/ingest"
	"modelplane/internal/natstest"
	"modelplane/internal/pgtest"
	"modelplane/internal/wait"
)

func natsServer(t *testing.T) string { return natstest.New(t).ClientURL() }

func streamMsgs(t *testing.T, e *env) uint64 {
	t.Helper()
	s, err := e.js.Stream(context.Background(), busapi.StreamUsage)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

// TestDuplicatesInsideWindow publishes every batch twice with its id while
// the consumer runs: JetStream drops the second copy, and the ledger shows
// each row once.
func TestDuplicatesInsideWindow(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, 0)
	e.start(t, e.usageConfig(t, e.js))
	var batches []busapi.UsageBatch
	for sec := range int64(40) {
		for n := range 5 {
			batches = append(batches, nodeSecond(fmt.Sprintf("node-%d", n), sec, 8))
		}
	}
	e.publishAsync(t, e.js, batches)
	for _, b := range batches {
		if ack := e.publish(t, e.js, b); !ack.Duplicate {
			t.Fatalf("second publish of %s inside the window: not reported as a duplicate", b.ID)
		}
	}
	e.waitDrained(t, "", 30*time.Second)
	if n := streamMsgs(t, e); n != uint64(len(batches)) {
		t.Errorf("stream holds %d messages, want %d", n, len(batches))
	}
	e.l.check(t, e.ch)
}

// TestRepublishAfterWindow replays batches after the JetStream duplicate
// window (1 s here, 2 min in production) has forgotten their ids, so the
// stream holds each of them twice, as it does when an agent replays its
// spool late. Both copies in one fetch, a copy arriving after the first was
// stored, and a batch of which ClickHouse holds only part (an insert split
// across two day partitions that failed half-way) are each stored once.
func TestRepublishAfterWindow(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, time.Second)
	// replayLate publishes each batch again once the window has forgotten
	// its id: a publish inside the window is dropped as a duplicate and
	// changes nothing, so it is simply tried again until it is stored.
	replayLate := func(batches []busapi.UsageBatch) {
		for _, b := range batches {
			wait.Eventually(t, 10*time.Second, func() bool { return !e.publish(t, e.js, b).Duplicate },
				"replay of %s still a duplicate: the window never forgot it", b.ID)
		}
	}
	var a, b []busapi.UsageBatch
	for sec := range int64(10) {
		for n := range 4 {
			a = append(a, nodeSecond(fmt.Sprintf("a-%d", n), sec, 8))
			b = append(b, nodeSecond(fmt.Sprintf("b-%d", n), sec, 8))
		}
	}
	// Both copies of A are in the stream before the consumer starts, so they
	// meet within one worker's gathered set.
	e.publishAsync(t, e.js, a)
	replayLate(a)
	u := e.start(t, e.usageConfig(t, e.js))
	e.publishAsync(t, e.js, b)
	e.waitDrained(t, "", 30*time.Second)
	replayLate(b)
	// C: ClickHouse already holds rows 0–4 of the batch.
	c := nodeSecond("c-0", 0, 8)
	partial, err := e.ch.PrepareBatch(context.Background(), "INSERT INTO gpu_usage (ts, node, gpu, slice, gpu_type, profile, replica, requests, rate_uusd_per_hour, batch_id, row_idx)")
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range c.Records[:5] {
		rate, _ := rates.At(r.GPUType, r.Profile, time.Unix(r.Time, 0))
		if err := partial.Append(time.Unix(r.Time, 0), r.Node, uint16(r.GPU), uint16(r.Slice), r.GPUType, r.Profile, r.Replica, uint64(r.Requests), uint64(rate), c.ID, uint32(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := partial.Send(); err != nil {
		t.Fatal(err)
	}
	e.publish(t, e.js, c)
	e.waitDrained(t, "", 30*time.Second)
	if n, want := streamMsgs(t, e), uint64(2*len(a)+2*len(b)+1); n != want {
		t.Errorf("stream holds %d messages, want %d (each of A and B twice)", n, want)
	}
	st := u.Stats()
	if want := uint64(len(a) + len(b)); st.DuplicateBatches < want {
		t.Errorf("duplicate batches skipped = %d, want at least %d", st.DuplicateBatches, want)
	}
	if want := uint64(e.l.rows()) - 5; st.Rows != want {
		t.Errorf("rows inserted by the consumer = %d, want %d: all but the 5 of batch C already stored", st.Rows, want)
	}
	e.l.check(t, e.ch)
}

// TestOneBillPerSlotSecond is the attack of issue 25 finding 1: node a
// bills one GPU-second three times, twice in one batch and again in a
// second batch with another id, sent both in the same gathering and after
// the first was stored. The ledger holds that slot-second once and bills
// it once; each repeat is dropped and counted for operators. A second slot
// whose row is byte for byte the same as the first's, as two idle slices
// reported alike are, is still billed: rows are told apart by slot and
// second, never by content. (This replaces TestIdenticalRowsBothCount,
// which asserted the old rule: a GPU-second billed three times.)
func TestOneBillPerSlotSecond(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, 0)
	reg := prometheus.NewRegistry()
	cfg := e.usageConfig(t, e.js)
	cfg.Metrics = reg
	u := e.start(t, cfg)
	idle := busapi.Usage{Time: baseTime, Node: "idle-1", GPU: 3, GPUType: "A100-80GB", Profile: busapi.ProfileFull, Replica: "idle-1-r3"}
	twin := idle
	twin.GPU = 4
	same := busapi.UsageBatch{ID: "idle-1-a", Node: "idle-1", Records: []busapi.Usage{idle, idle, twin}}
	again := busapi.UsageBatch{ID: "idle-1-b", Node: "idle-1", Records: []busapi.Usage{idle}}
	later := busapi.UsageBatch{ID: "idle-1-c", Node: "idle-1", Records: []busapi.Usage{idle, twin}}
	e.publishAsync(t, e.js, []busapi.UsageBatch{same, again})
	e.waitDrained(t, "", 30*time.Second)
	e.publish(t, e.js, later)
	e.waitDrained(t, "", 30*time.Second)
	e.l.check(t, e.ch)
	var rows, cost uint64
	if err := e.ch.QueryRow(context.Background(), "SELECT count() FROM gpu_usage WHERE gpu = 3").Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != 1 {
		t.Errorf("gpu_usage rows of GPU 3 at %d = %d, want 1", baseTime, rows)
	}
	if err := e.ch.QueryRow(context.Background(), "SELECT sum(cost_uusd_x3600) FROM gpu_usage_hourly").Scan(&cost); err != nil {
		t.Fatal(err)
	}
	if want := uint64(2 * rates[busapi.ProfileFull]); cost != want {
		t.Errorf("rollup cost numerator = %d, want %d (one second of each of two GPUs)", cost, want)
	}
	if st := u.Stats(); st.RepeatedRows != 4 || st.Rows != 2 {
		t.Errorf("stats: %d rows stored, %d repeats dropped; want 2 and 4", st.Rows, st.RepeatedRows)
	}
	if got := counterValue(t, reg, "mp_ingest_usage_repeated_rows_total"); got != 4 {
		t.Errorf("mp_ingest_usage_repeated_rows_total = %v, want 4", got)
	}
}

// counterValue is the value of the counter name in reg.
func counterValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no counter %s", name)
	return 0
}

// TestPricesAtRateInForce prices with the real rate table in PostgreSQL: a
// new A100 rate from 09:00:30 bills the seconds from then on and not one
// before, MIG slices are priced at their own rates, and a GPU type without a
// rate is stored at 0 and counted.
func TestPricesAtRateInForce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.New(t)
	change := time.Unix(baseTime+30, 0)
	if _, err := pool.Exec(ctx, `INSERT INTO cost_rates (gpu_type, profile, uusd_per_hour, effective_from) VALUES ('A100-80GB', 'full', 4000000, $1)`, change); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, nil, 0)
	cfg := e.usageConfig(t, e.js)
	cfg.LoadRates = func(ctx context.Context) (ingest.Pricer, error) { return billing.LoadRates(ctx, db.New(pool)) }
	u := e.start(t, cfg)
	var batches []busapi.UsageBatch
	for sec := range int64(60) {
		b := nodeSecond("p-0", sec, 2)
		b.Records = append(b.Records, busapi.Usage{Time: baseTime + sec, Node: "p-0", GPU: 2, GPUType: "T4", Profile: busapi.ProfileFull})
		batches = append(batches, b)
	}
	e.publishAsync(t, e.js, batches)
	e.waitDrained(t, "", 30*time.Second)
	rows, err := e.ch.Query(ctx, "SELECT gpu_type, profile, ts >= toDateTime(?), count(), min(rate_uusd_per_hour), max(rate_uusd_per_hour) FROM gpu_usage GROUP BY gpu_type, profile, ts >= toDateTime(?) ORDER BY 1, 2, 3", change.Unix(), change.Unix())
	if err != nil {
		t.Fatal(err)
	}
	type key struct {
		gpuType, profile string
		after            uint8
	}
	got := map[key][3]uint64{}
	for rows.Next() {
		var (
			k            key
			n, min, max_ uint64
		)
		if err := rows.Scan(&k.gpuType, &k.profile, &k.after, &n, &min, &max_); err != nil {
			t.Fatal(err)
		}
		got[k] = [3]uint64{n, min, max_}
	}
	rows.Close()
	for k, want := range map[key][3]uint64{
		{"A100-80GB", "full", 0}:        {30, 3_500_000, 3_500_000},
		{"A100-80GB", "full", 1}:        {30, 4_000_000, 4_000_000},
		{"A100-80GB", "mig-3g.40gb", 0}: {30, 1_750_000, 1_750_000},
		{"A100-80GB", "mig-1g.10gb", 1}: {30, 500_000, 500_000},
		{"T4", "full", 1}:               {30, 0, 0},
	} {
		if got[k] != want {
			t.Errorf("%v: count, min rate, max rate = %v, want %v", k, got[k], want)
		}
	}
	if st := u.Stats(); st.UnpricedRows != 60 {
		t.Errorf("unpriced rows = %d, want 60", st.UnpricedRows)
	}
	var raw, rollup uint64
	if err := e.ch.QueryRow(ctx, "SELECT sum(rate_uusd_per_hour) FROM gpu_usage").Scan(&raw); err != nil {
		t.Fatal(err)
	}
	if err := e.ch.QueryRow(ctx, "SELECT sum(cost_uusd_x3600) FROM gpu_usage_hourly").Scan(&rollup); err != nil {
		t.Fatal(err)
	}
	want := uint64(30*3_500_000 + 30*4_000_000 + 60*1_750_000 + 60*500_000)
	if raw != want || rollup != want {
		t.Errorf("cost numerator raw %d, rollup %d; want %d", raw, rollup, want)
	}
}

// TestPoisonTerminated publishes a message that is neither JSON nor a
// binary batch, a batch that bills another node than its subject names (in
// JSON and in binary) and a binary batch cut short: each is terminated and
// counted, never redelivered, and the good batches around them land.
func TestPoisonTerminated(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, 0)
	u := e.start(t, e.usageConfig(t, e.js))
	ctx := context.Background()
	good := nodeSecond("n-1", 0, 4)
	e.publish(t, e.js, good)
	if _, err := e.js.Publish(ctx, busapi.UsageSubject("n-1"), []byte("{not json"), jetstream.WithMsgID("junk")); err != nil {
		t.Fatal(err)
	}
	forged := nodeSecond("n-2", 0, 4)
	data, _ := json.Marshal(forged)
	if _, err := e.js.Publish(ctx, busapi.UsageSubject("n-1"), data, jetstream.WithMsgID(forged.ID)); err != nil {
		t.Fatal(err)
	}
	// The same in binary, and a binary batch cut short.
	bin := busapi.AppendUsageBatch(nil, &forged)
	if _, err := e.js.Publish(ctx, busapi.UsageSubject("n-1"), bin, jetstream.WithMsgID(forged.ID+"/bin")); err != nil {
		t.Fatal(err)
	}
	cut := nodeSecond("n-1", 2, 4)
	bin = busapi.AppendUsageBatch(nil, &cut)
	if _, err := e.js.Publish(ctx, busapi.UsageSubject("n-1"), bin[:len(bin)-1], jetstream.WithMsgID(cut.ID)); err != nil {
		t.Fatal(err)
	}
	e.publish(t, e.js, nodeSecond("n-1", 1, 4))
	e.waitDrained(t, "", 30*time.Second)
	if st := u.Stats(); st.Poison != 4 {
		t.Errorf("poison = %d, want 4", st.Poison)
	}
	e.l.check(t, e.ch)
}

// TestRunAgain runs one Usage under two leases in turn, as a control-plane
// replica that loses its lease and takes it again does: the second run
// picks up where the first stopped.
func TestRunAgain(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, 0)
	u, err := ingest.NewUsage(e.usageConfig(t, e.js))
	if err != nil {
		t.Fatal(err)
	}
	for lease := range int64(2) {
		if err := u.Start(context.Background()); err != nil {
			t.Fatalf("lease %d: %v", lease, err)
		}
		var batches []busapi.UsageBatch
		for sec := range int64(20) {
			batches = append(batches, nodeSecond("lease-1", lease*100+sec, 4))
		}
		e.publishAsync(t, e.js, batches)
		e.waitDrained(t, "", 30*time.Second)
		u.Stop()
	}
	if st := u.Stats(); st.Batches != 40 {
		t.Errorf("batches acked over both runs = %d, want 40", st.Batches)
	}
	e.l.check(t, e.ch)
}
