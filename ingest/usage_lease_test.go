package ingest_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/coder/quartz"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"modelplane/busapi"
	"modelplane/ingest"
	"modelplane/internal/natstest"
)

// TestLeaseMovesWhileRowsRepeat moves the usage lease between two ingest
// processes, A to B and back to A, while agents publish live seconds and
// bill seconds again under new batch ids: seconds A stored, repeated to B;
// seconds B stored, repeated to A when it leads again. Each run learns what
// gpu_usage holds when it starts and remembers what it inserts, so live
// rows are inserted without a lookup and every repeat is found and
// dropped: the ledger holds each slot-second once. A that kept the memory
// of its first run would bill B's seconds twice.
func TestLeaseMovesWhileRowsRepeat(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, 0)
	// The consumers' clock stands half an hour after the first second, so
	// every row is recent enough for their memory to decide it.
	clk := quartz.NewMock(t)
	clk.Set(time.Unix(baseTime, 0).Add(30 * time.Minute))
	process := func() *ingest.Usage {
		nc, err := nats.Connect(e.url, natstest.ControlPlane(t)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		cfg := e.usageConfig(t, js)
		cfg.Clock = clk
		// Nothing here is redelivered: a slow insert must not be either.
		cfg.AckWait = time.Minute
		u, err := ingest.NewUsage(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(u.Stop)
		return u
	}
	a, b := process(), process()
	const nodes = 4
	seconds := func(from, to int64, suffix string) []busapi.UsageBatch {
		var out []busapi.UsageBatch
		for sec := from; sec < to; sec++ {
			for n := range nodes {
				batch := nodeSecond(fmt.Sprintf("lease-%d", n), sec, 8)
				batch.ID += suffix
				out = append(out, batch)
			}
		}
		return out
	}
	rowsOf := func(batches []busapi.UsageBatch) (n uint64) {
		for _, b := range batches {
			n += uint64(len(b.Records))
		}
		return n
	}
	lead := func(u *ingest.Usage) {
		t.Helper()
		if err := u.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	// phase publishes batches, waits until they are stored, and returns
	// how u's counters moved meanwhile.
	phase := func(u *ingest.Usage, batches []busapi.UsageBatch) ingest.UsageStats {
		t.Helper()
		before := u.Stats()
		e.publishAsync(t, e.js, batches)
		e.waitDrained(t, "", 60*time.Second)
		after := u.Stats()
		return ingest.UsageStats{Rows: after.Rows - before.Rows, RepeatedRows: after.RepeatedRows - before.RepeatedRows,
			LookedUpRows: after.LookedUpRows - before.LookedUpRows}
	}
	check := func(who string, got ingest.UsageStats, rows, repeated, lookedUp uint64) {
		t.Helper()
		if got.Rows != rows || got.RepeatedRows != repeated || got.LookedUpRows != lookedUp {
			t.Errorf("%s: %d rows stored, %d repeats dropped, %d rows looked up; want %d, %d, %d",
				who, got.Rows, got.RepeatedRows, got.LookedUpRows, rows, repeated, lookedUp)
		}
	}

	lead(a)
	live := seconds(0, 10, "")
	check("A, live seconds", phase(a, live), rowsOf(live), 0, 0)
	again := seconds(5, 7, "-again")
	check("A, its own seconds again", phase(a, again), 0, rowsOf(again), rowsOf(again))

	a.Stop()
	lead(b)
	live = seconds(10, 20, "")
	check("B, live seconds", phase(b, live), rowsOf(live), 0, 0)
	again = seconds(0, 5, "-b")
	check("B, seconds A stored", phase(b, again), 0, rowsOf(again), rowsOf(again))

	b.Stop()
	lead(a)
	again = seconds(12, 17, "-a")
	check("A again, seconds B stored", phase(a, again), 0, rowsOf(again), rowsOf(again))
	live = seconds(20, 25, "")
	check("A again, live seconds", phase(a, live), rowsOf(live), 0, 0)

	e.l.check(t, e.ch)
}
