package ingest_test

import (
	"context"
	"testing"
	"time"

	"modelplane/ingest"
	"modelplane/internal/chproc"
	"modelplane/migrations"
)

// TestClickHouseOutage kills ClickHouse under load for 60 s while agents go
// on publishing, then starts it again on the same address: every insert
// refused meanwhile is retried by redelivery, and everything lands once.
// It runs its own ClickHouse server, since it stops it.
func TestClickHouseOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("60 s ClickHouse outage")
	}
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
	time.Sleep(3 * time.Second)
	before := u.Stats()
	srv.Kill()
	t.Logf("ClickHouse killed after %d rows", before.Rows)
	time.Sleep(60 * time.Second)
	if err := srv.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	during := u.Stats()
	t.Logf("ClickHouse back; %d inserts refused meanwhile, %d rows attempted so far", during.InsertFailures-before.InsertFailures, e.l.rows())
	time.Sleep(3 * time.Second)
	close(stop)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	e.waitDrained(t, "", 90*time.Second)
	// An insert the kill cut off between gpu_usage's part and the view's
	// leaves the rollup short until the consumer repairs it.
	for deadline := time.Now().Add(30 * time.Second); u.Stats().RollupRepairPending; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("hourly rollup repair still pending 30 s after the drain")
		}
	}
	t.Logf("rollup repairs %d, keys repaired %d", u.Stats().RollupRepairs, u.Stats().RollupKeysRepaired)
	if during.InsertFailures == before.InsertFailures {
		t.Error("no insert failed during the outage; the test did not take ClickHouse away")
	}
	e.l.check(t, ch)
}
