package gateway

import (
	"math"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"modelplane/busapi"
)

// maxBuckets is how many token buckets a limiter holds before it evicts the
// full ones. API keys are bounded by the table the gateway watches, so the
// map only outgrows this after many deletions.
const maxBuckets = 1 << 16

// limiter is a set of token buckets, one per name (an API key prefix),
// created on first use. A nil *limiter lets everything through. An
// endpoint's bucket is not here but in its route (routeLimiter): it changes
// only with the route, so the request path looks nothing up for it.
type limiter struct {
	limit rate.Limit
	burst int

	buckets  sync.Map // string → *rate.Limiter
	n        atomic.Int64
	sweeping atomic.Bool
}

// newLimiter returns a limiter of rps requests per second with bursts of
// burst (at least one, the rate rounded up when 0); nil when rps is 0.
func newLimiter(rps float64, burst int) *limiter {
	if rps <= 0 {
		return nil
	}
	if burst <= 0 {
		burst = max(1, int(math.Ceil(rps)))
	}
	return &limiter{limit: rate.Limit(rps), burst: burst}
}

// allow takes one token from name's bucket at now. When there is none it
// returns how long until there will be, and takes nothing.
func (l *limiter) allow(name string, now time.Time) (ok bool, retry time.Duration) {
	if l == nil {
		return true, 0
	}
	return take(l.bucket(name, now), now)
}

// take takes one token from b at now, or returns how long until there
// will be one and takes nothing.
func take(b *rate.Limiter, now time.Time) (ok bool, retry time.Duration) {
	if b.AllowN(now, 1) {
		return true, 0
	}
	// Only the refused pay for a reservation, to learn the delay.
	r := b.ReserveN(now, 1)
	if !r.OK() {
		return false, time.Second
	}
	d := r.DelayFrom(now)
	if d <= 0 {
		return true, 0 // refilled in between: keep the token
	}
	r.CancelAt(now)
	return false, d
}

func (l *limiter) bucket(name string, now time.Time) *rate.Limiter {
	if b, ok := l.buckets.Load(name); ok {
		return b.(*rate.Limiter)
	}
	b, loaded := l.buckets.LoadOrStore(name, rate.NewLimiter(l.limit, l.burst))
	if !loaded && l.n.Add(1) > maxBuckets {
		l.sweep(now)
	}
	return b.(*rate.Limiter)
}

// routeLimiter returns the token bucket of the endpoint src: its own rate
// (RateLimitRPS, bursts of RateLimitBurst) or else the gateway's default
// in d, bursts of the rate rounded up when 0; nil when unlimited. prev's
// bucket is kept with the tokens it holds, so that a route update (a new
// replica, a weight change) does not refill it; a changed rate or burst
// applies from now on.
func routeLimiter(src busapi.Route, prev *route, d routeDefaults) *rate.Limiter {
	rps, burst := d.rps, d.burst
	if src.RateLimitRPS > 0 {
		rps, burst = src.RateLimitRPS, src.RateLimitBurst
	}
	if rps <= 0 {
		return nil
	}
	if burst <= 0 {
		burst = max(1, int(math.Ceil(rps)))
	}
	lim := rate.Limit(rps)
	if prev == nil || prev.limiter == nil {
		return rate.NewLimiter(lim, burst)
	}
	b := prev.limiter
	if b.Limit() != lim || b.Burst() != burst {
		now := time.Now()
		if d.clock != nil {
			now = d.clock.Now()
		}
		b.SetLimitAt(now, lim)
		b.SetBurstAt(now, burst)
	}
	return b
}

// sweep forgets the buckets that are full again: a full bucket behaves
// exactly like a new one, so evicting it changes no answer (a token taken
// during the sweep may be forgiven). One sweep runs
// at a time; the others carry on.
func (l *limiter) sweep(now time.Time) {
	if !l.sweeping.CompareAndSwap(false, true) {
		return
	}
	defer l.sweeping.Store(false)
	l.buckets.Range(func(k, v any) bool {
		if b := v.(*rate.Limiter); b.TokensAt(now) >= float64(b.Burst()) {
			l.buckets.Delete(k)
			l.n.Add(-1)
		}
		return true
	})
}

// retryAfter is a Retry-After value: whole seconds, rounded up, at least 1.
func retryAfter(d time.Duration) string {
	s := int64((d + time.Second - 1) / time.Second)
	return strconv.FormatInt(max(1, s), 10)
}

// admit applies the rate limits, the caller's key first, then a granted
// caller's team's (grant.go), then the endpoint, and answers 429 when one
// is spent. A request refused by a later bucket has still used the
// earlier ones' tokens.
func (g *Gateway) admit(w http.ResponseWriter, c *call, rt *route) bool {
	if g.keyLimit == nil && rt.limiter == nil && (c.grant == nil || c.grant.limiter == nil) {
		return true
	}
	now := g.now()
	if ok, d := g.keyLimit.allow(c.key, now); !ok {
		g.tooMany(w, c, d, "rate limited", "this API key is over its request rate")
		return false
	}
	if !g.admitGrantRate(w, c, now) {
		return false
	}
	if rt.limiter == nil {
		return true
	}
	if ok, d := take(rt.limiter, now); !ok {
		g.tooMany(w, c, d, "rate limited", "endpoint "+strconv.Quote(c.endpoint)+" is over its request rate")
		return false
	}
	return true
}

// shed answers a request that no replica of its version can take now
// without queueing past MaxOutstandingPerReplica.
func (g *Gateway) shed(w http.ResponseWriter, c *call) {
	g.tooMany(w, c, time.Second, "overloaded", "every replica of version "+strconv.Quote(c.ver.name)+" is at its bound of outstanding requests")
}

func (g *Gateway) tooMany(w http.ResponseWriter, c *call, d time.Duration, title, detail string) {
	w.Header().Set("Retry-After", retryAfter(d))
	g.fail(w, c, http.StatusTooManyRequests, title, detail)
}
