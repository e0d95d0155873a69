package gateway

import (
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/coder/quartz"

	"modelplane/busapi"
)

func TestLimiterRetryAfterAndIndependentKeys(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	l := newLimiter(0.5, 2) // one token every 2 s, bursts of 2
	for i := range 2 {
		if ok, _ := l.allow("a", now); !ok {
			t.Fatalf("request %d within the burst refused", i+1)
		}
	}
	ok, d := l.allow("a", now)
	if ok || d != 2*time.Second || retryAfter(d) != "2" {
		t.Fatalf("over the burst: ok %v delay %v Retry-After %s, want refused, 2s, 2", ok, d, retryAfter(d))
	}
	if ok, _ := l.allow("b", now); !ok {
		t.Error("key b refused because key a is spent")
	}
	// A refusal takes no token: after 2 s there is exactly one again.
	now = now.Add(2 * time.Second)
	if ok, _ := l.allow("a", now); !ok {
		t.Error("refilled token refused")
	}
	if ok, _ := l.allow("a", now); ok {
		t.Error("second request after one refill allowed")
	}
}

func TestLimiterUnlimitedAndDefaults(t *testing.T) {
	t.Parallel()
	if l := newLimiter(0, 5); l != nil {
		t.Errorf("rate 0 = %+v, want nil (unlimited)", l)
	}
	var l *limiter
	if ok, _ := l.allow("x", time.Now()); !ok {
		t.Error("nil limiter refused")
	}
	if got := newLimiter(2.5, 0).burst; got != 3 {
		t.Errorf("default burst of 2.5 rps = %d, want 3", got)
	}
	for d, want := range map[time.Duration]string{0: "1", time.Millisecond: "1", time.Second: "1", 1001 * time.Millisecond: "2", 90 * time.Second: "90"} {
		if got := retryAfter(d); got != want {
			t.Errorf("retryAfter(%v) = %s, want %s", d, got, want)
		}
	}
}

func TestLimiterEvictsFullBuckets(t *testing.T) {
	t.Parallel()
	now := time.Now()
	l := newLimiter(1, 1)
	for i := range maxBuckets - 1 {
		l.allow(strconv.Itoa(i), now)
	}
	// The last bucket before the bound is spent at the time of the sweep.
	later := now.Add(2 * time.Second)
	if ok, _ := l.allow("spent", later); !ok {
		t.Fatal("first request of key spent refused")
	}
	// Every other bucket has refilled; the next new one sweeps them (and
	// itself, full when the sweep runs).
	l.allow("new", later)
	if n := l.n.Load(); n != 1 {
		t.Errorf("%d buckets after the sweep, want 1 (the spent one)", n)
	}
	if _, ok := l.buckets.Load("spent"); !ok {
		t.Fatal("the spent bucket was evicted by the sweep")
	}
	// It survived spent: its caller stays limited.
	if ok, _ := l.allow("spent", later); ok {
		t.Error("spent bucket forgotten: its caller is allowed again")
	}
}

func TestAcquireNeverExceedsBound(t *testing.T) {
	t.Parallel()
	v := &version{name: "v1", upstreams: []*upstream{{id: "a"}, {id: "b"}}}
	const bound = 3
	var wg sync.WaitGroup
	var mu sync.Mutex
	got, shed := 0, 0
	for range 100 {
		wg.Go(func() {
			u, saturated := v.acquire(nil, bound, 0)
			mu.Lock()
			defer mu.Unlock()
			if u != nil {
				got++
			} else if saturated {
				shed++
			}
		})
	}
	wg.Wait()
	if got != 2*bound || shed != 100-2*bound {
		t.Errorf("acquired %d, shed %d; want %d and %d", got, shed, 2*bound, 100-2*bound)
	}
	for _, u := range v.upstreams {
		if n := u.inFlight.Load(); n != bound {
			t.Errorf("replica %s has %d outstanding, want %d", u.id, n, bound)
		}
	}
	if u, saturated := (&version{}).acquire(nil, bound, 0); u != nil || saturated {
		t.Error("a version without replicas is not saturated, it is unavailable")
	}
	if u, _ := v.acquire(nil, 0, 0); u == nil {
		t.Error("bound 0 (off) refused")
	}
}

// TestRouteLimiterOutlivesUpdates: an endpoint's bucket is the gateway's
// default unless the route has its own rate, and a route update keeps the
// bucket with its tokens, applying a changed rate from then on.
func TestRouteLimiterOutlivesUpdates(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	clk := quartz.NewMock(t)
	clk.Set(now)
	d := routeDefaults{timeout: time.Second, rps: 2, clock: clk}
	src := busapi.Route{Endpoint: "e", Generation: 1}
	if rt := newRoute(src, nil, routeDefaults{timeout: time.Second}); rt.limiter != nil {
		t.Fatalf("no rate anywhere: limiter %v, want nil (unlimited)", rt.limiter)
	}
	rt := newRoute(src, nil, d)
	if rt.limiter == nil || rt.limiter.Limit() != 2 || rt.limiter.Burst() != 2 {
		t.Fatalf("gateway default 2 rps: limiter %+v, want 2 rps, bursts of 2", rt.limiter)
	}
	for i := range 2 {
		if ok, _ := take(rt.limiter, now); !ok {
			t.Fatalf("request %d within the burst refused", i+1)
		}
	}
	src.Generation = 2 // an update that leaves the rate alone
	up := newRoute(src, rt, d)
	if up.limiter != rt.limiter {
		t.Fatal("a route update replaced the endpoint's bucket")
	}
	if ok, _ := take(up.limiter, now); ok {
		t.Error("a route update refilled the spent bucket")
	}
	src.Generation, src.RateLimitRPS, src.RateLimitBurst = 3, 0.5, 5 // the endpoint's own rate
	own := newRoute(src, up, d)
	if own.limiter != rt.limiter || own.limiter.Limit() != 0.5 || own.limiter.Burst() != 5 {
		t.Fatalf("own rate: limiter %+v (same bucket %v), want the same bucket at 0.5 rps, bursts of 5",
			own.limiter, own.limiter == rt.limiter)
	}
	if ok, d := take(own.limiter, now); ok || d != 2*time.Second {
		t.Errorf("after the rate change: ok %v delay %v, want refused for 2s (still spent, one token per 2 s)", ok, d)
	}
}
