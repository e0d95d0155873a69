package ingest

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// ErrRollupAboveRaw means the hourly rollup holds more, for some key, than
// gpu_usage does: something other than a lost view block (a row deleted
// from gpu_usage, a row written into the rollup by hand). RepairRollup never
// subtracts; an operator must look. The error names the keys.
var ErrRollupAboveRaw = errors.New("hourly rollup above gpu_usage")

// ErrRepairRaced means gpu_usage or the rollup was being written in the
// range while RepairRollup read it, so the difference it read may not be
// what is missing; it inserted nothing. Retry later.
var ErrRepairRaced = errors.New("rollup repair raced a write")

// writeIDPrefix starts the query id of every INSERT this package sends to
// gpu_usage or gpu_usage_hourly, followed by the database and a random
// part. RepairRollup looks for it in system.processes: ClickHouse 18.16
// shows no database there, and the test harness runs many databases on one
// server.
const writeIDPrefix = "modelplane-ingest/"

// writeContext tags an insert into database db with a query id that
// RepairRollup recognises as a write in flight.
func writeContext(ctx context.Context, db string) context.Context {
	return clickhouse.Context(ctx, clickhouse.WithQueryID(writeIDPrefix+db+"/"+rand.Text()))
}

// rollupKey is the rollup's sort key; hour is in Unix seconds.
type rollupKey struct {
	hour                                                      int64
	team, endpoint, model, version, replica, gpuType, profile string
}

func (k rollupKey) String() string {
	return fmt.Sprintf("%s team=%q endpoint=%q model=%q version=%q replica=%q gpu_type=%q profile=%q",
		time.Unix(k.hour, 0).UTC().Format("2006-01-02T15Z"), k.team, k.endpoint, k.model, k.version, k.replica, k.gpuType, k.profile)
}

// rollupSums are the summed columns of one key.
type rollupSums struct {
	seconds, cost, requests, memory uint64
	util                            float64
}

// RepairRollup makes gpu_usage_hourly add up to gpu_usage again for every
// hour that [from, to) touches (from rounded down, to up, to whole hours of
// the server's time zone, as the view rounds). It returns the number of
// keys it inserted a row for.
//
// Why it is needed: on ClickHouse 18.16 an INSERT into gpu_usage writes
// the table's part first and the view's part after it, not atomically. An
// insert that fails in between leaves the rows stored and the rollup short;
// the consumer naks, the redelivered rows are skipped as stored, and
// nothing would ever feed the view those rows again.
//
// It reads, per rollup key, the raw aggregates of gpu_usage and the sum()s
// of the rollup (always summed: SummingMergeTree merges are eventual), and
// inserts raw minus rollup as one more row for each key where the rollup
// is short. Integer columns come out exact; util_pct_sum is a float summed
// in another order on each side, so its difference is inserted as it is
// and may be off in the last bits (a key whose integers agree is left
// alone, whatever its float says).
//
// A key whose rollup is above the raw table is never repaired (a repair
// only adds); the other keys are, and the error wraps ErrRollupAboveRaw and
// names the keys. A range being written while it reads gets ErrRepairRaced
// and no insert.
//
// Why a concurrent write cannot make it count twice. An insert I into
// gpu_usage commits its part S, then runs the view and commits the
// rollup's part V (or fails and never does); each SELECT sees the parts
// committed when it started. The reads go in this order:
//
//  1. raw aggregates of gpu_usage;
//  2. system.processes: any insert of this package into gpu_usage or the
//     rollup of this database still running gets ErrRepairRaced;
//  3. the rollup's sums;
//  4. count() of gpu_usage in the range again: a change gets ErrRepairRaced.
//
// If S was in read 1, I was running before read 2; finding it no longer
// running there, its V was either committed before read 3 (and is in it:
// I adds nothing to the difference) or never will be (and the difference
// is exactly the rows I lost, which is what the repair is for). Without
// step 2 an insert whose V commits after read 3 would be counted by the
// repair and then by its own V. If S was not in read 1, I's rows are not
// in the difference; but its V may be in read 3 and make a short key look
// less short, so step 4 refuses the result when any row arrived in the
// range after read 1 (rows are never deleted, so a changed count is the
// only trace one leaves). Reading the rollup before the raw table instead
// would let an insert landing between the two reads be counted twice.
// Step 2 sees only this package's inserts (tagged by query id), which are
// the only writers of these tables, and one server's processes (a single
// server, not replicated). Two repairs of one database must not run at
// once: each could insert the same difference. The consumer runs them one
// at a time, under a lock that also holds its own inserts off, and runs
// one per durable consumer under a lease, as deduplication already
// requires.
func RepairRollup(ctx context.Context, ch driver.Conn, from, to time.Time) (int, error) {
	lo, hi := from.Unix(), to.Unix()
	if to.After(time.Unix(hi, 0)) {
		hi++
	}
	lo = max(lo, 0)
	if hi <= lo {
		return 0, nil
	}
	// toStartOfHour(toDateTime(hi+3599)) rounds hi up to the hour, in the
	// server's time zone like the view's toStartOfHour(ts).
	hi += 3599
	raw, err := rawSums(ctx, ch, lo, hi)
	if err != nil {
		return 0, err
	}
	db, running, err := writesRunning(ctx, ch)
	if err != nil {
		return 0, err
	}
	if running > 0 {
		return 0, fmt.Errorf("%w: %d inserts running", ErrRepairRaced, running)
	}
	rolled, err := rolledSums(ctx, ch, lo, hi)
	if err != nil {
		return 0, err
	}
	var rawRows, again uint64
	for _, s := range raw {
		rawRows += s.seconds
	}
	if err := ch.QueryRow(ctx, `SELECT count() FROM gpu_usage
		WHERE ts >= toStartOfHour(toDateTime(?)) AND ts < toStartOfHour(toDateTime(?))`, lo, hi).Scan(&again); err != nil {
		return 0, fmt.Errorf("count gpu_usage: %w", err)
	}
	if again != rawRows {
		return 0, fmt.Errorf("%w: gpu_usage went from %d to %d rows", ErrRepairRaced, rawRows, again)
	}

	var (
		add   rollupColumns
		above []string
	)
	for k, r := range raw {
		s := rolled[k]
		delete(rolled, k)
		if s.seconds > r.seconds || s.cost > r.cost || s.requests > r.requests || s.memory > r.memory {
			above = append(above, k.String())
			continue
		}
		if s.seconds == r.seconds && s.cost == r.cost && s.requests == r.requests && s.memory == r.memory {
			continue
		}
		add.append(k, rollupSums{
			seconds: r.seconds - s.seconds, cost: r.cost - s.cost, requests: r.requests - s.requests,
			memory: r.memory - s.memory, util: r.util - s.util,
		})
	}
	for k, s := range rolled {
		if s.seconds != 0 || s.cost != 0 || s.requests != 0 || s.memory != 0 {
			above = append(above, k.String())
		}
	}
	if n := len(add.hour); n > 0 {
		if err := add.insert(writeContext(ctx, db), ch); err != nil {
			return 0, fmt.Errorf("insert rollup repair: %w", err)
		}
	}
	if len(above) > 0 {
		return len(add.hour), fmt.Errorf("%w for %d keys: %s", ErrRollupAboveRaw, len(above), listSome(above, 5))
	}
	return len(add.hour), nil
}

// listSome joins up to n of ss and says how many more there are.
func listSome(ss []string, n int) string {
	if len(ss) <= n {
		return strings.Join(ss, "; ")
	}
	return fmt.Sprintf("%s; and %d more", strings.Join(ss[:n], "; "), len(ss)-n)
}

func rawSums(ctx context.Context, ch driver.Conn, lo, hi int64) (map[rollupKey]rollupSums, error) {
	rows, err := ch.Query(ctx, `SELECT toStartOfHour(ts) AS hour, team, endpoint, model, version, replica, gpu_type, profile,
			count(), sum(rate_uusd_per_hour), sum(requests), sum(memory_mb), sum(util_pct)
		FROM gpu_usage
		WHERE ts >= toStartOfHour(toDateTime(?)) AND ts < toStartOfHour(toDateTime(?))
		GROUP BY hour, team, endpoint, model, version, replica, gpu_type, profile`, lo, hi)
	if err != nil {
		return nil, fmt.Errorf("sum gpu_usage: %w", err)
	}
	sums, err := scanSums(rows)
	if err != nil {
		return nil, fmt.Errorf("sum gpu_usage: %w", err)
	}
	return sums, nil
}

func rolledSums(ctx context.Context, ch driver.Conn, lo, hi int64) (map[rollupKey]rollupSums, error) {
	rows, err := ch.Query(ctx, `SELECT hour, team, endpoint, model, version, replica, gpu_type, profile,
			sum(gpu_seconds), sum(cost_uusd_x3600), sum(requests), sum(memory_mb_sum), sum(util_pct_sum)
		FROM gpu_usage_hourly
		WHERE hour >= toStartOfHour(toDateTime(?)) AND hour < toStartOfHour(toDateTime(?))
		GROUP BY hour, team, endpoint, model, version, replica, gpu_type, profile`, lo, hi)
	if err != nil {
		return nil, fmt.Errorf("sum gpu_usage_hourly: %w", err)
	}
	sums, err := scanSums(rows)
	if err != nil {
		return nil, fmt.Errorf("sum gpu_usage_hourly: %w", err)
	}
	return sums, nil
}

func scanSums(rows driver.Rows) (map[rollupKey]rollupSums, error) {
	defer rows.Close()
	sums := make(map[rollupKey]rollupSums)
	for rows.Next() {
		var (
			k    rollupKey
			hour time.Time
			s    rollupSums
		)
		if err := rows.Scan(&hour, &k.team, &k.endpoint, &k.model, &k.version, &k.replica, &k.gpuType, &k.profile,
			&s.seconds, &s.cost, &s.requests, &s.memory, &s.util); err != nil {
			return nil, err
		}
		k.hour = hour.Unix()
		sums[k] = s
	}
	return sums, rows.Err()
}

// writesRunning returns the current database and how many of this
// package's inserts into it are running.
func writesRunning(ctx context.Context, ch driver.Conn) (db string, running uint64, err error) {
	err = ch.QueryRow(ctx, `SELECT currentDatabase(), countIf(startsWith(query_id, concat(?, currentDatabase(), '/')))
		FROM system.processes`, writeIDPrefix).Scan(&db, &running)
	if err != nil {
		return "", 0, fmt.Errorf("find running inserts: %w", err)
	}
	return db, running, nil
}

// rollupColumns are rows for gpu_usage_hourly, by column.
type rollupColumns struct {
	hour                                                      []time.Time
	team, endpoint, model, version, replica, gpuType, profile []string
	seconds, cost, requests, memory                           []uint64
	util                                                      []float64
}

func (c *rollupColumns) append(k rollupKey, s rollupSums) {
	c.hour = append(c.hour, time.Unix(k.hour, 0))
	c.team = append(c.team, k.team)
	c.endpoint = append(c.endpoint, k.endpoint)
	c.model = append(c.model, k.model)
	c.version = append(c.version, k.version)
	c.replica = append(c.replica, k.replica)
	c.gpuType = append(c.gpuType, k.gpuType)
	c.profile = append(c.profile, k.profile)
	c.seconds = append(c.seconds, s.seconds)
	c.cost = append(c.cost, s.cost)
	c.requests = append(c.requests, s.requests)
	c.memory = append(c.memory, s.memory)
	c.util = append(c.util, s.util)
}

// insert writes the rows through the view's name, which on ClickHouse
// 18.16 writes the view's inner table (.inner.gpu_usage_hourly) without
// running the view's SELECT.
func (c *rollupColumns) insert(ctx context.Context, ch driver.Conn) error {
	batch, err := ch.PrepareBatch(ctx, "INSERT INTO gpu_usage_hourly (hour, team, endpoint, model, version, replica, gpu_type, profile, "+
		"gpu_seconds, cost_uusd_x3600, requests, memory_mb_sum, util_pct_sum)")
	if err != nil {
		return err
	}
	defer batch.Close()
	for i, col := range []any{c.hour, c.team, c.endpoint, c.model, c.version, c.replica, c.gpuType, c.profile,
		c.seconds, c.cost, c.requests, c.memory, c.util} {
		if err := batch.Column(i).Append(col); err != nil {
			return fmt.Errorf("column %d: %w", i, err)
		}
	}
	return batch.Send()
}

// RepairWindow is how far back the consumer repairs the rollup when it
// starts: a process that died with a repair pending left no note of it,
// and an insert that failed on its way out was at most a few MaxNakDelays
// old. Hours still being written are fine to repair: a repair adds only
// what the rollup lacks against gpu_usage at that moment, and rows that
// arrive later feed the view themselves.
const RepairWindow = 2 * time.Hour

// rollupPending is the consumer's note of the hours whose rollup a failed
// insert may have left short, and the lock that keeps its repairs apart
// from its inserts.
type rollupPending struct {
	// writes is held shared by each insert into gpu_usage and exclusively
	// by a repair: a repair racing the consumer's own inserts could only
	// end in ErrRepairRaced, so they wait the few queries it takes.
	writes sync.RWMutex
	wake   chan struct{} // capacity 1

	mu       sync.Mutex
	from, to time.Time // to.IsZero(): nothing pending
	running  bool      // a repair has taken the range and not finished
}

// add marks [from, to) as needing a repair, merged with what is pending.
func (p *rollupPending) add(from, to time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.addLocked(from, to)
}

func (p *rollupPending) addLocked(from, to time.Time) {
	if p.to.IsZero() {
		p.from, p.to = from, to
		return
	}
	if from.Before(p.from) {
		p.from = from
	}
	if to.After(p.to) {
		p.to = to
	}
}

// take returns what is pending and clears it; finish must follow.
func (p *rollupPending) take() (from, to time.Time, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	from, to = p.from, p.to
	p.from, p.to = time.Time{}, time.Time{}
	p.running = !to.IsZero()
	return from, to, p.running
}

// finish ends a repair of what take returned, putting the range back when
// the repair failed.
func (p *rollupPending) finish(from, to time.Time, failed bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if failed {
		p.addLocked(from, to)
	}
	p.running = false
}

// pending says whether a repair is pending or running.
func (p *rollupPending) pending() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.to.IsZero() || p.running
}

// poke asks the repair loop to run now if a repair is pending.
func (p *rollupPending) poke() {
	p.mu.Lock()
	pending := !p.to.IsZero()
	p.mu.Unlock()
	if pending {
		select {
		case p.wake <- struct{}{}:
		default:
		}
	}
}

// repairRollups repairs the pending hours when a store succeeds (ClickHouse
// answers), at most once per RepairInterval, and every RepairInterval
// without one. A failed repair leaves its hours pending. A repair that
// failed for another reason than a race is retried at the next successful
// store rather than after RepairInterval, once: it most likely failed in
// the outage that failed the insert, and the rollup is wrong until it
// runs. Twice, and it is something else, not worth a query a store.
func (u *Usage) repairRollups(ctx context.Context) {
	tick := u.cfg.Clock.NewTicker(u.cfg.RepairInterval)
	defer tick.Stop()
	var (
		last           time.Time
		early, failing bool
	)
	for {
		wasEarly := false // this attempt is the early retry
		select {
		case <-ctx.Done():
			return
		case <-u.repair.wake:
			if !early && u.cfg.Clock.Since(last) < u.cfg.RepairInterval {
				continue
			}
			wasEarly = early
		case <-tick.C:
		}
		from, to, ok := u.repair.take()
		if !ok {
			continue
		}
		last = u.cfg.Clock.Now()
		early = false
		cctx, cancel := context.WithTimeout(ctx, u.cfg.Timeout)
		u.repair.writes.Lock()
		n, err := RepairRollup(cctx, u.cfg.CH, from, to)
		u.repair.writes.Unlock()
		cancel()
		// Trying ErrRollupAboveRaw again cannot help: a repair only adds.
		retry := err != nil && !errors.Is(err, ErrRollupAboveRaw)
		u.repair.finish(from, to, retry)
		if n > 0 {
			u.stats.rollupRepairs.Add(1)
			u.stats.rollupKeys.Add(uint64(n))
			u.log.Warn("hourly rollup repaired after a failed insert", "keys", n, "from", from, "to", to)
		}
		switch {
		case err == nil:
			u.log.Debug("hourly rollup checked", "from", from, "to", to, "keys_repaired", n)
			failing = false
		case !retry:
			u.log.Error("hourly rollup not repaired", "from", from, "to", to, "err", err)
			failing = false
		case ctx.Err() != nil:
			return
		case errors.Is(err, ErrRepairRaced):
			u.log.Debug("hourly rollup repair deferred", "err", err)
		case !failing:
			u.log.Warn("hourly rollup repair failed; retrying", "from", from, "to", to, "err", err)
			failing, early = true, !wasEarly
		default:
			u.log.Debug("hourly rollup repair failed again", "err", err)
			early = !wasEarly
		}
	}
}

// database returns the ClickHouse database the consumer writes, which
// tags its inserts (see writeContext); it asks once.
func (u *Usage) database(ctx context.Context) (string, error) {
	if db := u.db.Load(); db != nil {
		return *db, nil
	}
	var db string
	if err := u.cfg.CH.QueryRow(ctx, "SELECT currentDatabase()").Scan(&db); err != nil {
		return "", fmt.Errorf("current database: %w", err)
	}
	u.db.Store(&db)
	return db, nil
}
