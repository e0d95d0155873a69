package reqstats_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/coder/quartz"

	"modelplane/busapi"
	"modelplane/internal/chtest"
	"modelplane/internal/wait"
	"modelplane/readcache"
	"modelplane/reqstats"
)

// insertOverhead stores one window of endpoint "fraud" with n requests in
// its overhead histogram.
func insertOverhead(t *testing.T, ch driver.Conn, at time.Time, n uint64, id string) {
	t.Helper()
	b, err := ch.PrepareBatch(context.Background(), "INSERT INTO request_stats (window_start, window_start_ms, window_end, window_end_ms, "+
		"gateway, endpoint, team, version, requests, latency_buckets, overhead_buckets, msg_id)")
	if err != nil {
		t.Fatal(err)
	}
	h := make([]uint64, busapi.LatencyBuckets)
	h[3] = n
	if err := b.Append(at, uint16(0), at.Add(5*time.Second), uint16(0), "gw-1", "fraud", "risk", "v1", n, h, h, id); err != nil {
		t.Fatal(err)
	}
	if err := b.Send(); err != nil {
		t.Fatal(err)
	}
}

// TestExplorerCacheServesWithinItsBound: a Reader WithCache answers the
// explorer from its cache while the answer is fresh, serves it while a
// background read refreshes it once stale, and never serves one past the
// bound; the raw Reader sees every window at once.
func TestExplorerCacheServesWithinItsBound(t *testing.T) {
	t.Parallel()
	ch := chtest.New(t)
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	clk := quartz.NewMock(t)
	clk.Set(now)
	cached := reqstats.NewReader(ch, clk).WithCache(readcache.Options{Fresh: 10 * time.Second, MaxAge: time.Minute})
	direct := reqstats.NewReader(ch, clk)
	ctx := t.Context()
	requests := func(r *reqstats.Reader) uint64 {
		t.Helper()
		x, err := r.Explore(ctx, "fraud", 0, 60)
		if err != nil {
			t.Fatal(err)
		}
		return x.All.Requests
	}
	insertOverhead(t, ch, now.Add(-time.Minute), 5, "a")
	if got := requests(cached); got != 5 {
		t.Fatalf("first read: %d requests, want 5", got)
	}
	insertOverhead(t, ch, now.Add(-30*time.Second), 7, "b")
	if got, raw := requests(cached), requests(direct); got != 5 || raw != 12 {
		t.Errorf("within Fresh: cached %d, raw %d; want 5 and 12", got, raw)
	}
	clk.Advance(11 * time.Second)
	if got := requests(cached); got != 5 {
		t.Errorf("stale: %d requests, want the kept 5 at once", got)
	}
	wait.Eventually(t, 30*time.Second, func() bool { return requests(cached) == 12 }, "the background refresh never served 12 requests")
	insertOverhead(t, ch, now.Add(-20*time.Second), 1, "c")
	clk.Advance(time.Minute)
	if got := requests(cached); got != 13 {
		t.Errorf("past the bound: %d requests, want a new read's 13", got)
	}
}

// gatedConn is a real ClickHouse connection whose queries start only when
// the test lets them (each one announced on started first), so a test can
// act while a read is under way; a query whose context ends first fails
// as clickhouse-go's does.
type gatedConn struct {
	driver.Conn
	started chan struct{}
	gate    chan struct{}
}

func (c *gatedConn) Query(ctx context.Context, q string, args ...any) (driver.Rows, error) {
	c.started <- struct{}{}
	select {
	case <-c.gate:
		return c.Conn.Query(ctx, q, args...)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// TestExplorerReadOutlivesTheCallerThatStartedIt: the explorer's cached
// read runs on a context of its own, so when the page that started it goes
// away mid-read (the connection closed, the client's timeout), ClickHouse
// is still asked on a live context, the next caller gets the answer, and
// the answer is kept: no caller sees another's "context canceled", and no
// second scan runs. Before, the read ran on the first caller's request
// context and every caller waiting on it failed with that context.
func TestExplorerReadOutlivesTheCallerThatStartedIt(t *testing.T) {
	t.Parallel()
	ch := chtest.New(t)
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	clk := quartz.NewMock(t)
	clk.Set(now)
	insertOverhead(t, ch, now.Add(-time.Minute), 5, "a")
	conn := &gatedConn{Conn: ch, started: make(chan struct{}, 8), gate: make(chan struct{})}
	r := reqstats.NewReader(conn, clk).WithCache(readcache.Options{Fresh: 10 * time.Second, MaxAge: time.Minute})

	page, leave := context.WithCancel(t.Context())
	left := make(chan error, 1)
	go func() {
		_, err := r.Explore(page, "fraud", 0, 60)
		left <- err
	}()
	<-conn.started
	leave()
	if err := <-left; !errors.Is(err, context.Canceled) {
		t.Fatalf("the page that left got %v, want %v", err, context.Canceled)
	}
	next := make(chan error, 1)
	var x reqstats.Explorer
	go func() {
		var err error
		x, err = r.Explore(t.Context(), "fraud", 0, 60)
		next <- err
	}()
	close(conn.gate)
	if err := <-next; err != nil || x.All.Requests != 5 {
		t.Fatalf("the next caller got %d requests, %v; want the read's 5", x.All.Requests, err)
	}
	queries := len(conn.started)
	insertOverhead(t, ch, now.Add(-30*time.Second), 7, "b")
	if x, err := r.Explore(t.Context(), "fraud", 0, 60); err != nil || x.All.Requests != 5 {
		t.Errorf("within Fresh: %d requests, %v; want the kept 5", x.All.Requests, err)
	}
	// One read is two queries (overhead, then the notable requests); the
	// first was announced before the page left.
	if queries != 1 || len(conn.started) != 1 {
		t.Errorf("%d then %d queries after the first, want the one read's 1 and no more", queries, len(conn.started))
	}
}
