package drift_test

import (
	"context"
	"testing"
	"time"

	"github.com/coder/quartz"

	"modelplane/auth"
	"modelplane/drift"
	"modelplane/internal/chtest"
	"modelplane/internal/pgtest"
	"modelplane/internal/wait"
	"modelplane/readcache"
)

// TestReportCacheServesWithinItsBound: a Service WithCache serves a
// computed report while it is fresh, serves it while a background
// computation refreshes it once stale, never serves one past the bound,
// and keeps reports of other versions apart.
func TestReportCacheServesWithinItsBound(t *testing.T) {
	t.Parallel()
	pool, ch := pgtest.New(t), chtest.New(t)
	ctx := context.Background()
	seed(t, pool, "fraud")
	id := endpointID(t, pool, "fraud")
	t0 := time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC)
	garbage(t, ch, "fraud", id, t0, 1000)
	clk := quartz.NewMock(t)
	clk.Set(t0)
	admin := &auth.Principal{Name: "admin", PlatformRole: auth.RolePlatformAdmin}
	svc := drift.NewService(pool, drift.NewReader(ch, drift.ReaderConfig{}), clk).
		WithCache(readcache.Options{Fresh: time.Minute, MaxAge: 10 * time.Minute})
	report := func(version string) drift.Report {
		t.Helper()
		rep, err := svc.Report(ctx, admin, "fraud", drift.Query{Version: version})
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
	current := func(version string) uint64 { return report(version).CurrentSamples }
	if n := current("v24"); n != 1000 {
		t.Fatalf("first report: %d current samples, want 1000", n)
	}
	// 500 more samples of v24 in the current window.
	insertID(t, ch, "fraud", id, rows("v24", t0.Add(-10*time.Minute), 10*time.Minute, normal(500, 100, 20, 11), normal(500, 40, 10, 12), normal(500, 0.5, 0.3, 13)))
	clk.Advance(30 * time.Second)
	if rep := report("v24"); rep.CurrentSamples != 1000 || !rep.Current.To.Equal(t0) {
		t.Errorf("within a minute: %d current samples to %s, want the cached 1000 to %s", rep.CurrentSamples, rep.Current.To, t0)
	}
	if n := current("v23"); n != 1000 {
		t.Errorf("another version: %d current samples, want its own 1000", n)
	}
	clk.Advance(time.Minute)
	if n := current("v24"); n != 1000 {
		t.Errorf("stale: %d current samples, want the cached 1000 at once", n)
	}
	wait.Eventually(t, 30*time.Second, func() bool { return current("v24") == 1500 }, "the background refresh never counted 1,500 samples")
	// Past the bound nothing cached is served: the report is computed
	// now, its current window ending now.
	clk.Advance(10 * time.Minute)
	if rep := report("v24"); !rep.Current.To.Equal(clk.Now()) {
		t.Errorf("past the bound: current window to %s, want a new report's, to %s", rep.Current.To, clk.Now())
	}
}
