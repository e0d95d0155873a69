package gateway

import (
	"encoding/json"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"modelplane/busapi"
)

// Wake-up of endpoints scaled to zero (min_replicas 0). The control plane
// starts a replica when a gateway asks on busapi.WakeSubject and keeps it for
// an idle grace period after the last ask (docs/gateway.md, docs/fleet.md).
const (
	// wakeEvery is the shortest time between two wake requests of one
	// endpoint from this gateway while it answers 202.
	wakeEvery = time.Second
	// wakeRefresh is the shortest time between two reminders of an endpoint
	// this gateway serves, which extend the grace while traffic flows. The
	// control plane refuses a grace shorter than a minute, so a reminder
	// every 10 s keeps a busy endpoint up however the requests fall.
	wakeRefresh = 10 * time.Second
)

// waker throttles wake requests per endpoint; its zero value is ready.
type waker struct {
	// last holds, per endpoint, the *atomic.Int64 Unix nanosecond time of
	// the last request sent.
	last sync.Map
	// sent counts requests handed to NATS (counted when the request path
	// decides to send), failed those NATS refused.
	sent, failed atomic.Uint64
}

// wake asks the control plane to start (idle: no replica was ready, the
// caller gets 202) or keep (a replica serves) a replica of an endpoint
// scaled to zero; for any other endpoint it is one inlined test on the
// request path.
func (g *Gateway) wake(src *busapi.Route, idle bool) {
	if src.ScaledToZero {
		g.wakeScaledToZero(src, idle)
	}
}

// wakeScaledToZero sends the throttled wake request. The publish runs off
// the request's goroutine, so a slow NATS never delays a caller.
func (g *Gateway) wakeScaledToZero(src *busapi.Route, idle bool) {
	every := wakeRefresh
	if idle {
		every = wakeEvery
	}
	now := g.now()
	v, ok := g.wakes.last.Load(src.Endpoint)
	if !ok {
		v, _ = g.wakes.last.LoadOrStore(src.Endpoint, new(atomic.Int64))
	}
	last := v.(*atomic.Int64)
	prev := last.Load()
	if prev != 0 && now.UnixNano()-prev < int64(every) {
		return
	}
	// One request wins the slot; concurrent ones see it taken.
	if !last.CompareAndSwap(prev, now.UnixNano()) {
		return
	}
	if g.nc == nil {
		return
	}
	msg := busapi.Wake{Endpoint: src.Endpoint, Gateway: g.cfg.ID, Served: !idle, At: now}
	g.wakes.sent.Add(1)
	go func() {
		data, _ := json.Marshal(msg)
		if err := g.nc.Publish(busapi.WakeSubject(msg.Endpoint), data); err != nil {
			g.wakes.failed.Add(1)
			g.log.Debug("wake request not sent", slog.String("endpoint", msg.Endpoint), slog.String("error", err.Error()))
		}
	}()
}

// WakeCounters are the wake requests this gateway sent (counted when the
// request path decided to send one) and those NATS refused.
type WakeCounters struct {
	Sent, Failed uint64
}

// Wakes returns the wake request counters.
func (g *Gateway) Wakes() WakeCounters {
	return WakeCounters{Sent: g.wakes.sent.Load(), Failed: g.wakes.failed.Load()}
}
