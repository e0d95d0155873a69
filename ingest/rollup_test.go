package ingest_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"modelplane/busapi"
	"modelplane/ingest"
	"modelplane/internal/chtest"
	"modelplane/internal/wait"
)

// failView makes ClickHouse 18.16 refuse the view's part of an insert into
// gpu_usage after it stored the table's: the view's SELECT runs with the
// insert's settings, and it is the only GROUP BY in an insert, so a limit
// of one GROUP BY row (group_by_overflow_mode is "throw" by default; the
// driver cannot send it to an 18.16 server) stops it on any block of two
// rollup keys. That is the
// failure RepairRollup exists for, made by ClickHouse itself.
func failView(ctx context.Context) context.Context {
	return clickhouse.Context(ctx, clickhouse.WithSettings(clickhouse.Settings{"max_rows_to_group_by": 1}))
}

// insertBatches writes batches into gpu_usage in one INSERT, as the
// consumer would, priced with the test rates.
func insertBatches(ctx context.Context, ch driver.Conn, batches []busapi.UsageBatch) error {
	b, err := ch.PrepareBatch(ctx, "INSERT INTO gpu_usage (ts, node, gpu, slice, gpu_type, profile, team, endpoint, model, version, replica, "+
		"util_pct, memory_mb, requests, rate_uusd_per_hour, batch_id, row_idx)")
	if err != nil {
		return err
	}
	defer b.Close()
	for _, batch := range batches {
		for i, r := range batch.Records {
			rate, _ := rates.At(r.GPUType, r.Profile, time.Unix(r.Time, 0))
			if err := b.Append(time.Unix(r.Time, 0), r.Node, uint16(r.GPU), uint16(r.Slice), r.GPUType, r.Profile, r.Team, r.Endpoint,
				r.Model, r.Version, r.Replica, float32(r.UtilPct), uint64(r.MemoryMB), uint64(r.Requests), uint64(rate), batch.ID, uint32(i)); err != nil {
				return err
			}
		}
	}
	return b.Send()
}

// seconds returns one batch per node per second for secs seconds from
// offset from baseTime.
func seconds(nodes []string, from, secs int64, gpus int) []busapi.UsageBatch {
	var out []busapi.UsageBatch
	for s := from; s < from+secs; s++ {
		for _, n := range nodes {
			out = append(out, nodeSecond(n, s, gpus))
		}
	}
	return out
}

type keySums struct {
	seconds, cost, requests, memory uint64
	util                            float64
}

// sumsBy sums a table by rollup key; the key is printed for messages.
func sumsBy(t *testing.T, ch driver.Conn, query string) map[string]keySums {
	t.Helper()
	rows, err := ch.Query(context.Background(), query)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := make(map[string]keySums)
	for rows.Next() {
		var (
			hour                                                      time.Time
			team, endpoint, model, version, replica, gpuType, profile string
			s                                                         keySums
		)
		if err := rows.Scan(&hour, &team, &endpoint, &model, &version, &replica, &gpuType, &profile,
			&s.seconds, &s.cost, &s.requests, &s.memory, &s.util); err != nil {
			t.Fatal(err)
		}
		out[fmt.Sprintf("%s team=%q endpoint=%q model=%q version=%q replica=%q gpu_type=%q profile=%q",
			hour.UTC().Format("2006-01-02T15Z"), team, endpoint, model, version, replica, gpuType, profile)] = s
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// unequalKeys lists the keys whose rollup differs from gpu_usage: integers
// exactly, the float util sum within rounding.
func unequalKeys(t *testing.T, ch driver.Conn) map[string]string {
	t.Helper()
	raw := sumsBy(t, ch, `SELECT toStartOfHour(ts) AS hour, team, endpoint, model, version, replica, gpu_type, profile,
		count(), sum(rate_uusd_per_hour), sum(requests), sum(memory_mb), sum(util_pct)
		FROM gpu_usage GROUP BY hour, team, endpoint, model, version, replica, gpu_type, profile`)
	rolled := sumsBy(t, ch, `SELECT hour, team, endpoint, model, version, replica, gpu_type, profile,
		sum(gpu_seconds), sum(cost_uusd_x3600), sum(requests), sum(memory_mb_sum), sum(util_pct_sum)
		FROM gpu_usage_hourly GROUP BY hour, team, endpoint, model, version, replica, gpu_type, profile`)
	out := make(map[string]string)
	for k, r := range raw {
		s := rolled[k]
		delete(rolled, k)
		if r.seconds != s.seconds || r.cost != s.cost || r.requests != s.requests || r.memory != s.memory ||
			math.Abs(r.util-s.util) > 1e-9*max(1, math.Abs(r.util)) {
			out[k] = fmt.Sprintf("rollup %+v, raw %+v", s, r)
		}
	}
	for k, s := range rolled {
		out[k] = fmt.Sprintf("rollup %+v, no raw rows", s)
	}
	return out
}

func hourStart(h int64) time.Time { return time.Unix(baseTime+h*3600, 0) }

// TestRepairRollup stores seconds in three hours, some of them by inserts
// whose view part ClickHouse refused (the rows are in gpu_usage, not in
// the rollup), and repairs: first part of one hour (the whole hour is
// repaired, no other), then all three; afterwards every key adds up, and a
// repair again finds nothing to do.
func TestRepairRollup(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ch := chtest.New(t)
	for h := range int64(3) {
		if err := insertBatches(ctx, ch, seconds([]string{"a-0", "a-1"}, h*3600, 5, 4)); err != nil {
			t.Fatal(err)
		}
		// Lost view blocks: more seconds of a-0's keys, and a node whose
		// replicas the rollup has never seen.
		lost := seconds([]string{"a-0", "b-0"}, h*3600+100, 3, 4)
		if err := insertBatches(failView(ctx), ch, lost); err == nil || !strings.Contains(err.Error(), "while pushing to view") {
			t.Fatalf("insert with the view refused: err = %v, want the view's error", err)
		}
	}
	var stored uint64
	if err := ch.QueryRow(ctx, "SELECT count() FROM gpu_usage").Scan(&stored); err != nil {
		t.Fatal(err)
	}
	// 4 GPUs a second: 2 whole, 2 split in two slices: 6 rows.
	if want := uint64(3 * (2*5 + 2*3) * 6); stored != want {
		t.Fatalf("gpu_usage holds %d rows, want %d: the refused inserts must have stored theirs", stored, want)
	}
	short := unequalKeys(t, ch)
	shortIn := func(h int64) int {
		n := 0
		for k := range short {
			if strings.HasPrefix(k, hourStart(h).UTC().Format("2006-01-02T15Z")) {
				n++
			}
		}
		return n
	}
	// Per hour: a-0's 5 keys (2 whole, 2 3g slices, the shared idle 1g
	// key) and b-0's 4 replicas; the idle key is one.
	if shortIn(0) != 9 || shortIn(1) != 9 || shortIn(2) != 9 {
		t.Fatalf("short keys per hour = %d, %d, %d; want 9 each: %v", shortIn(0), shortIn(1), shortIn(2), short)
	}

	n, err := ingest.RepairRollup(ctx, ch, hourStart(1).Add(10*time.Minute), hourStart(1).Add(20*time.Minute))
	if err != nil || n != 9 {
		t.Fatalf("repair of 10 minutes of hour 1 = %d, %v; want its 9 short keys, nil", n, err)
	}
	if left := unequalKeys(t, ch); len(left) != 18 {
		t.Fatalf("after repairing hour 1, %d keys short, want 18 (hours 0 and 2): %v", len(left), left)
	}
	n, err = ingest.RepairRollup(ctx, ch, hourStart(0), hourStart(3))
	if err != nil || n != 18 {
		t.Fatalf("repair of the three hours = %d, %v; want 18, nil", n, err)
	}
	if left := unequalKeys(t, ch); len(left) != 0 {
		t.Errorf("after the repair, keys where the rollup differs from gpu_usage: %v", left)
	}
	n, err = ingest.RepairRollup(ctx, ch, hourStart(-1), hourStart(4))
	if err != nil || n != 0 {
		t.Errorf("second repair = %d, %v; want 0, nil", n, err)
	}
	var hSeconds, hCost, hRequests, rawCost, rawRequests uint64
	if err := ch.QueryRow(ctx, "SELECT sum(gpu_seconds), sum(cost_uusd_x3600), sum(requests) FROM gpu_usage_hourly").Scan(&hSeconds, &hCost, &hRequests); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueryRow(ctx, "SELECT sum(rate_uusd_per_hour), sum(requests) FROM gpu_usage").Scan(&rawCost, &rawRequests); err != nil {
		t.Fatal(err)
	}
	if hSeconds != stored || hCost != rawCost || hRequests != rawRequests {
		t.Errorf("rollup totals %d s, %d µUSD×3600, %d requests; gpu_usage %d, %d, %d", hSeconds, hCost, hRequests, stored, rawCost, rawRequests)
	}
}

// TestRepairRollupNeverSubtracts puts a row into the rollup that
// gpu_usage does not back: the repair leaves that key as it is, reports it
// by name, and still repairs the keys that are short.
func TestRepairRollupNeverSubtracts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ch := chtest.New(t)
	if err := insertBatches(ctx, ch, seconds([]string{"c-0"}, 0, 10, 2)); err != nil {
		t.Fatal(err)
	}
	if err := insertBatches(failView(ctx), ch, seconds([]string{"d-0"}, 0, 2, 2)); err == nil {
		t.Fatal("insert with the view refused: no error")
	}
	extra, err := ch.PrepareBatch(ctx, "INSERT INTO gpu_usage_hourly (hour, team, endpoint, model, version, replica, gpu_type, profile, gpu_seconds, cost_uusd_x3600, requests)")
	if err != nil {
		t.Fatal(err)
	}
	if err := extra.Append(hourStart(0), "risk", "fraud", "fraud-xgb", "v3", "c-0-r0", "A100-80GB", busapi.ProfileFull, uint64(5), uint64(5*3_500_000), uint64(0)); err != nil {
		t.Fatal(err)
	}
	if err := extra.Send(); err != nil {
		t.Fatal(err)
	}
	before := unequalKeys(t, ch)
	if len(before) != 4 {
		t.Fatalf("keys differing before the repair: %d, want 4 (c-0-r0 above; d-0's 2 replicas and the idle key short): %v", len(before), before)
	}
	n, err := ingest.RepairRollup(ctx, ch, hourStart(0), hourStart(1))
	if !errors.Is(err, ingest.ErrRollupAboveRaw) || !strings.Contains(err.Error(), `replica="c-0-r0"`) {
		t.Errorf("repair error = %v; want ErrRollupAboveRaw naming replica c-0-r0", err)
	}
	if n != 3 {
		t.Errorf("keys repaired = %d, want 3", n)
	}
	after := unequalKeys(t, ch)
	if len(after) != 1 {
		t.Fatalf("keys differing after the repair: %v; want only c-0-r0", after)
	}
	var secs uint64
	if err := ch.QueryRow(ctx, "SELECT sum(gpu_seconds) FROM gpu_usage_hourly WHERE replica = 'c-0-r0'").Scan(&secs); err != nil {
		t.Fatal(err)
	}
	if secs != 15 {
		t.Errorf("c-0-r0 rollup GPU-seconds = %d, want 15 (10 stored, 5 extra, none taken away)", secs)
	}
}

// hookedCH lets a test step into the consumer's inserts: before runs ahead
// of PrepareBatch (and may change its context or refuse it), after once
// the server has the INSERT open (ClickHouse lists it in system.processes
// until the batch is sent).
type hookedCH struct {
	driver.Conn
	before func(ctx context.Context, query string) (context.Context, error)
	after  func(query string)
}

func (c *hookedCH) PrepareBatch(ctx context.Context, query string, opts ...driver.PrepareBatchOption) (driver.Batch, error) {
	if c.before != nil {
		var err error
		if ctx, err = c.before(ctx, query); err != nil {
			return nil, err
		}
	}
	b, err := c.Conn.PrepareBatch(ctx, query, opts...)
	if err == nil && c.after != nil {
		c.after(query)
	}
	return b, err
}

func isUsageInsert(query string) bool { return strings.HasPrefix(query, "INSERT INTO gpu_usage (") }

// TestRepairRollupWaitsForInsertInFlight holds one of the consumer's
// inserts open on the server, and repairs meanwhile: the repair sees it in
// system.processes and inserts nothing. (An insert whose rows are stored
// and whose view part is still to come would otherwise be counted by the
// repair and then by its view.) What this shows is that the consumer's
// inserts carry the tag the repair looks for, and that it looks; the
// server cannot be paused between the table's part and the view's.
func TestRepairRollupWaitsForInsertInFlight(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, 0)
	held, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	e.ch = &hookedCH{Conn: e.ch, after: func(query string) {
		if isUsageInsert(query) {
			once.Do(func() { close(held); <-release })
		}
	}}
	e.start(t, e.usageConfig(t, e.js))
	e.publishAsync(t, e.js, seconds([]string{"e-0"}, 0, 3, 4))
	select {
	case <-held:
	case <-time.After(30 * time.Second):
		t.Fatal("no insert started")
	}
	ctx := context.Background()
	raw := e.ch.(*hookedCH).Conn
	n, err := ingest.RepairRollup(ctx, raw, hourStart(0), hourStart(1))
	close(release)
	if !errors.Is(err, ingest.ErrRepairRaced) || n != 0 {
		t.Errorf("repair while an insert is open = %d, %v; want 0, ErrRepairRaced", n, err)
	}
	e.waitDrained(t, "", 30*time.Second)
	if n, err := ingest.RepairRollup(ctx, raw, hourStart(0), hourStart(1)); n != 0 || err != nil {
		t.Errorf("repair once drained = %d, %v; want 0, nil", n, err)
	}
	e.l.check(t, e.ch)
}

// TestRepairRollupUnderLoad repairs the hour the consumer is filling, over
// and over, while agents publish into it. Nothing is ever missing from the
// rollup here, so every repair must insert nothing: one that read the
// rollup before an insert's view part and gpu_usage after its table part
// would insert that insert a second time. Each repair either finds the
// hour level or gives up with ErrRepairRaced.
func TestRepairRollupUnderLoad(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, 0)
	e.start(t, e.usageConfig(t, e.js))
	stop := make(chan struct{})
	done := e.publishLoad(e.js, 10, 8, 20*time.Millisecond, stop)
	ctx := context.Background()
	var clean, raced int
	deadline := time.Now().Add(4 * time.Second)
	for time.Now().Before(deadline) {
		n, err := ingest.RepairRollup(ctx, e.ch, hourStart(0), hourStart(1))
		switch {
		case n != 0:
			t.Fatalf("repair under load inserted %d keys (err %v); nothing was missing", n, err)
		case errors.Is(err, ingest.ErrRepairRaced):
			raced++
		case err != nil:
			t.Fatal(err)
		default:
			clean++
		}
	}
	close(stop)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	e.waitDrained(t, "", 60*time.Second)
	t.Logf("%d repairs under load: %d found the hour level, %d raced a write", clean+raced, clean, raced)
	if raced == 0 {
		t.Error("no repair raced a write; the test did not exercise concurrency")
	}
	if left := unequalKeys(t, e.ch); len(left) != 0 {
		t.Errorf("keys where the rollup differs from gpu_usage: %v", left)
	}
	e.l.check(t, e.ch)
}

// TestConsumerRepairsRollup runs the consumer while ClickHouse refuses the
// view's part of every insert (the rows are stored, the rollup is not
// fed), then lets inserts through again; it also refuses the first
// repair's insert (a client-side error, nothing sent). The refused
// messages are redelivered and skipped as stored, so only the repair can
// level the rollup: it is retried after the failed attempt and must leave
// every key level. Covered: the pending-range bookkeeping on a real
// failure, the trigger after a successful store, the retry of a failed
// repair, the counters. Not covered: a consumer killed with a repair
// pending (the repair at Start is the same call, over the last
// RepairWindow of the clock, which baseTime need not be in).
func TestConsumerRepairsRollup(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, 0)
	var (
		viewFails      atomic.Bool
		repairFailures atomic.Int32
	)
	viewFails.Store(true)
	repairFailures.Store(1)
	e.ch = &hookedCH{Conn: e.ch, before: func(ctx context.Context, query string) (context.Context, error) {
		switch {
		case isUsageInsert(query) && viewFails.Load():
			return failView(ctx), nil
		case strings.HasPrefix(query, "INSERT INTO gpu_usage_hourly (") && repairFailures.Add(-1) >= 0:
			return ctx, errors.New("refused by the test")
		}
		return ctx, nil
	}}
	cfg := e.usageConfig(t, e.js)
	cfg.RepairInterval = 300 * time.Millisecond
	u := e.start(t, cfg)
	lost := seconds([]string{"f-0", "f-1", "f-2"}, 0, 30, 4)
	e.publishAsync(t, e.js, lost)
	e.waitDrained(t, "", 30*time.Second)
	viewFails.Store(false)
	fed := seconds([]string{"f-0", "f-3"}, 30, 30, 4)
	e.publishAsync(t, e.js, fed)
	e.waitDrained(t, "", 30*time.Second)
	wait.Eventually(t, 15*time.Second, func() bool { return u.Stats().RollupRepairs != 0 && len(unequalKeys(t, e.ch)) == 0 },
		"rollup not repaired: stats %v, keys differing %v", wait.Show(func() any { return u.Stats() }), wait.Show(func() any { return unequalKeys(t, e.ch) }))
	st := u.Stats()
	rows := func(bs []busapi.UsageBatch) (n uint64) {
		for _, b := range bs {
			n += uint64(len(b.Records))
		}
		return n
	}
	if st.InsertFailures == 0 || st.DuplicateRows < rows(lost) || st.Rows != rows(fed) {
		t.Errorf("insert failures %d, rows skipped as stored %d, rows inserted %d; want some, at least %d, %d: "+
			"the refused inserts must store their rows and feed the rollup none", st.InsertFailures, st.DuplicateRows, st.Rows, rows(lost), rows(fed))
	}
	if repairFailures.Load() >= 0 {
		t.Error("the repair's insert was not refused once and then retried")
	}
	// f-0..f-2: 4 replicas each and the idle key; more than one repair may
	// have fixed them, as failures came in.
	if st.RollupRepairs == 0 || st.RollupKeysRepaired < 13 {
		t.Errorf("rollup repairs %d, keys repaired %d; want at least 1, 13", st.RollupRepairs, st.RollupKeysRepaired)
	}
	e.l.check(t, e.ch)
}
