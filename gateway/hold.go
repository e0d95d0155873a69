package gateway

import (
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Scale from zero: a request to an endpoint scaled to zero that finds no
// ready replica waits here, in a bounded queue per endpoint, while the wake
// it sent starts one. Each routing-table update of the endpoint wakes its
// held requests, which look at the new entry: a replica of a version that
// takes traffic there answers them as usual. Past the endpoint's cold-start
// budget (proto.Route.ColdStartBudgetS), or when the queue is full, the
// caller gets 202 with a Retry-After from the version's measured cold
// start. The budget is apart from the upstream timeout, which starts when
// the request goes to the replica (docs/gateway.md).

// DefaultHoldQueue is how many requests of one endpoint may wait at a
// gateway for a replica of an endpoint scaled to zero (Config.HoldQueue).
const DefaultHoldQueue = 64

// holdRewake is how often a held request repeats its wake request, so that
// one lost on its way (core NATS) does not cost the whole budget.
const holdRewake = 5 * time.Second

// holds are the per-endpoint queues of held requests.
type holds struct {
	// size bounds each queue; 0 holds nothing.
	size int

	mu     sync.Mutex
	queues map[string]*holdQueue

	// waiting is the number of requests held now; the others count
	// requests that left the queue: served once a replica was ready,
	// expired past the budget, full turned away at once, left when the
	// caller went away (or the gateway stopped).
	waiting                     atomic.Int64
	served, expired, full, left atomic.Uint64
}

// holdQueue is one endpoint's held requests: how many, and the channel the
// next routing-table update of the endpoint closes.
type holdQueue struct {
	n       int
	changed chan struct{}
}

func newHolds(size int) *holds {
	return &holds{size: max(size, 0), queues: map[string]*holdQueue{}}
}

// enter takes a slot of endpoint's queue; false when the queue is full.
func (h *holds) enter(endpoint string) (*holdQueue, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	q := h.queues[endpoint]
	if q == nil {
		q = &holdQueue{changed: make(chan struct{})}
		h.queues[endpoint] = q
	}
	if q.n >= h.size {
		return nil, false
	}
	q.n++
	h.waiting.Add(1)
	return q, true
}

// leave frees the slot enter took; the last one out drops the queue.
func (h *holds) leave(endpoint string, q *holdQueue) {
	h.mu.Lock()
	defer h.mu.Unlock()
	q.n--
	h.waiting.Add(-1)
	if q.n == 0 && h.queues[endpoint] == q {
		delete(h.queues, endpoint)
	}
}

// next is the channel the next update of q's endpoint closes. A held
// request takes it before it reads the routing table, so an update between
// the two is never missed.
func (h *holds) next(q *holdQueue) <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	return q.changed
}

// updated wakes the requests held for endpoint after its routing entry
// changed (or went); the table holding the change is already stored.
func (h *holds) updated(endpoint string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if q := h.queues[endpoint]; q != nil {
		close(q.changed)
		q.changed = make(chan struct{})
	}
}

// updatedAll wakes every held request, after the whole table was replaced.
func (h *holds) updatedAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, q := range h.queues {
		close(q.changed)
		q.changed = make(chan struct{})
	}
}

// HoldCounters are the scale-from-zero queues' figures: requests held now,
// and those that left the queue, by how.
type HoldCounters struct {
	// Waiting is the number of requests held now.
	Waiting int64
	// Served were proxied once a replica was ready within the budget
	// (a blocking budget arriving meanwhile ends a hold in none of these);
	// Expired got 202 past the budget; Full got 202 at once, their
	// endpoint's queue being full; Left went away while held (the caller
	// disconnected, or the gateway stopped).
	Served, Expired, Full, Left uint64
}

// Holds returns the scale-from-zero queues' counters.
func (g *Gateway) Holds() HoldCounters {
	h := g.holds
	return HoldCounters{Waiting: h.waiting.Load(), Served: h.served.Load(), Expired: h.expired.Load(),
		Full: h.full.Load(), Left: h.left.Load()}
}

// hold waits, for a request of an endpoint scaled to zero that found no
// ready replica of v, until the routing table has one within the endpoint's
// cold-start budget. It returns the route and version to serve from, or
// false once it answered the caller (202 past the budget or with the queue
// full, 404 when the endpoint went) or the caller left.
func (g *Gateway) hold(w http.ResponseWriter, c *call, r *http.Request, rt *route, v *version) (*route, *version, bool) {
	budget := time.Duration(rt.src.ColdStartBudgetS) * time.Second
	if budget <= 0 || g.holds.size == 0 {
		g.coldStart(w, c, v, 0)
		return nil, nil, false
	}
	// The clock's timers exist before the request counts as held, so a
	// test that moves the clock once it sees it held moves them too.
	start := g.now()
	timer := g.cfg.Clock.NewTimer(budget, "gateway", "hold")
	defer timer.Stop()
	rewake := g.cfg.Clock.NewTicker(holdRewake, "gateway", "hold", "wake")
	defer rewake.Stop()
	q, ok := g.holds.enter(c.endpoint)
	if !ok {
		g.holds.full.Add(1)
		g.coldStart(w, c, v, 0)
		return nil, nil, false
	}
	defer g.holds.leave(c.endpoint, q)
	for {
		changed := g.holds.next(q)
		now := g.routes.Load().byName[c.endpoint]
		if now == nil || now.src.EndpointID != rt.src.EndpointID {
			g.holds.left.Add(1)
			g.fail(w, c, http.StatusNotFound, "not found", "no endpoint "+strconv.Quote(c.endpoint))
			return nil, nil, false
		}
		if nv := now.readyFor(v.name, c.pinned); nv != nil {
			g.holds.served.Add(1)
			g.metrics.held(c.endpoint, outcomeServed, g.now().Sub(start))
			return now, nv, true
		}
		if now.src.Blocked != "" {
			// A blocking budget came in: no replica will start, and proxy
			// answers why (503), counted in none of the outcomes.
			if nv := now.byName[v.name]; nv != nil {
				v = nv
			}
			return now, v, true
		}
		rt = now
		select {
		case <-changed:
		case <-rewake.C:
			g.wake(&rt.src, true)
		case <-timer.C:
			g.holds.expired.Add(1)
			waited := g.now().Sub(start)
			g.metrics.held(c.endpoint, outcomeExpired, waited)
			if nv := rt.byName[v.name]; nv != nil {
				v = nv // its latest measured cold start
			}
			g.coldStart(w, c, v, waited)
			return nil, nil, false
		case <-r.Context().Done():
			g.holds.left.Add(1)
			g.metrics.held(c.endpoint, outcomeLeft, g.now().Sub(start))
			c.status = 499 // the caller went away; nobody reads an answer
			return nil, nil, false
		case <-g.bg.Done():
			g.holds.left.Add(1)
			g.coldStart(w, c, v, g.now().Sub(start))
			return nil, nil, false
		}
	}
}

// readyFor is the version a held request of version name (pinned or not)
// is served by: that version when it has a replica, else, unless pinned,
// any version taking traffic that has one; nil while none has.
func (rt *route) readyFor(name string, pinned bool) *version {
	if v := rt.byName[name]; v != nil && len(v.upstreams) > 0 && (pinned || v.weight > 0 || v.arm) {
		return v
	}
	if pinned {
		return nil
	}
	for _, v := range rt.versions {
		if v.weight > 0 && len(v.upstreams) > 0 {
			return v
		}
	}
	return nil
}

// retryAfter is the Retry-After, in whole seconds and at least 1, of a 202
// for v after the request waited: what remains of the version's measured
// cold start, or the gateway's RetryAfter when none was measured or the
// measured time has passed already (the replica is late; ask again soon).
func (g *Gateway) retryAfter(v *version, waited time.Duration) int {
	d := g.cfg.RetryAfter
	if v != nil && v.coldStart > waited {
		d = v.coldStart - waited
	}
	return max(1, int((d+time.Second-1)/time.Second))
}
