package ingest_test

import (
	"context"
	"testing"
	"time"

	"modelplane/busapi"
	"modelplane/ingest"
	"modelplane/internal/chproc"
	"modelplane/internal/wait"
	"modelplane/migrations"
)

// outageRefusals is how long TestClickHouseOutage keeps ClickHouse down,
// counted in refused inserts rather than seconds: the shortest outage that
// still exercises the behaviour is one in which sets are refused, their
// messages redelivered and refused again, while the load goes on. Raise it
// for a longer soak.
const outageRefusals = 5

// TestClickHouseOutage kills ClickHouse under load until outageRefusals
// inserts were refused and messages redelivered, while agents go on
// publishing, then starts it again on the same address: every insert
// refused meanwhile is retried by redelivery, and everything lands once.
// It runs its own ClickHouse server, since it stops it.
func TestClickHouseOutage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv, err := chproc.Start(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	ch, err := ingest.OpenClickHouse(ctx, srv.URL("outage"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ch.Close() })
	if err := migrations.ClickHouse(ctx, ch); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, ch, 0)
	cfg := e.usageConfig(t, e.js)
	cfg.Timeout, cfg.MaxNakDelay = 3*time.Second, 2*time.Second
	u := e.start(t, cfg)
	stop := make(chan struct{})
	// 20 nodes of 8 GPUs, a second of theirs every 100 ms: 2,400 rows/s.
	done := e.publishLoad(e.js, 20, 8, 100*time.Millisecond, stop)
	// Under load: a second of every node stored.
	wait.Eventually(t, 30*time.Second, func() bool { return u.Stats().Rows >= 20*8 }, "no rows stored under load: %v", wait.Show(func() any { return u.Stats() }))
	before := u.Stats()
	redelivered := func() int {
		c, err := e.js.Consumer(ctx, busapi.StreamUsage, "ingest-usage")
		if err != nil {
			return 0
		}
		info, err := c.Info(ctx)
		if err != nil {
			return 0
		}
		return info.NumRedelivered
	}
	redeliveredBefore := redelivered()
	srv.Kill()
	t.Logf("ClickHouse killed after %d rows", before.Rows)
	wait.Eventually(t, 60*time.Second, func() bool {
		return u.Stats().InsertFailures >= before.InsertFailures+outageRefusals && redelivered() > redeliveredBefore
	}, "ClickHouse down: want %d inserts refused and messages redelivered: %v", outageRefusals, wait.Show(func() any { return u.Stats() }))
	if err := srv.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	during := u.Stats()
	t.Logf("ClickHouse back; %d inserts refused meanwhile, %d rows attempted so far", during.InsertFailures-before.InsertFailures, e.l.rows())
	// The load goes on a while after ClickHouse is back: new rows stored.
	wait.Eventually(t, 60*time.Second, func() bool { return u.Stats().Rows >= during.Rows+20*8 }, "no rows stored after ClickHouse came back: %v", wait.Show(func() any { return u.Stats() }))
	close(stop)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	e.waitDrained(t, "", 90*time.Second)
	// An insert the kill cut off between gpu_usage's part and the view's
	// leaves the rollup short until the consumer repairs it.
	wait.Eventually(t, 30*time.Second, func() bool { return !u.Stats().RollupRepairPending }, "hourly rollup repair still pending after the drain")
	t.Logf("rollup repairs %d, keys repaired %d", u.Stats().RollupRepairs, u.Stats().RollupKeysRepaired)
	e.l.check(t, ch)
}
