package fleet

import (
	"context"
	"log/slog"
	"time"

	"github.com/coder/quartz"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"modelplane/service"
	"modelplane/tracing"
)

// Controller runs reconcile passes: whenever woken (a heartbeat changed a
// replica's state, an endpoint changed) and at least every interval (node
// leases expire without any event).
type Controller struct {
	service.Runner
	clock    quartz.Clock
	fleet    *Fleet
	log      *slog.Logger
	interval time.Duration
	// listening tells when this process last started hearing heartbeats.
	listening Listener
	// published is called after a pass wrote to the outbox (it wakes the relay).
	published func()
	wake      chan struct{}
	tracer    trace.Tracer
}

// Listener tells when this process last started hearing the fleet's
// heartbeats (the Intake): no node is declared lost before it has listened
// for a full lease.
type Listener interface {
	ListeningSince() time.Time
}

// ControllerOptions configure a Controller. Listening is required.
type ControllerOptions struct {
	// Log receives warnings (nil: discarded).
	Log *slog.Logger
	// Interval is the longest time between passes (<= 0: a second).
	Interval time.Duration
	// Listening is the intake that hears the heartbeats.
	Listening Listener
	// Published is called when a pass wrote outbox rows (it wakes the
	// relay); nil: nothing is called.
	Published func()
	// Tracer traces each pass as a fleet.reconcile span with what it did
	// (package tracing); nil traces nothing.
	Tracer trace.TracerProvider
}

// NewController returns a Controller ticking on the fleet's clock.
func NewController(f *Fleet, o ControllerOptions) *Controller {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Interval <= 0 {
		o.Interval = time.Second
	}
	if o.Tracer == nil {
		o.Tracer = tracing.Off()
	}
	return &Controller{clock: f.clock, fleet: f, log: o.Log, interval: o.Interval, listening: o.Listening, published: o.Published,
		wake: make(chan struct{}, 1), tracer: o.Tracer.Tracer("modelplane/fleet")}
}

// Wake asks for a pass now.
func (c *Controller) Wake() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// Settle is how long a controller listens to heartbeats before its first
// pass: longer than an agent's heartbeat interval, so that every live node
// has reported before anything is placed. Placing earlier puts replicas on
// whichever nodes spoke first (a 4 GB model on a whole GPU because the MIG
// node had not registered yet), and nothing moves them back.
const Settle = 5 * time.Second

// Start reconciles in the background, after Settle, until Stop. Run it
// under a leader lease (db.Lease).
func (c *Controller) Start(ctx context.Context) error {
	return c.Go(ctx, func(ctx context.Context) {
		if !service.Sleep(ctx, c.clock, Settle) {
			return
		}
		service.Tick(ctx, c.clock, c.interval, c.wake, c.pass)
	})
}

func (c *Controller) pass(ctx context.Context) {
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	pctx, span := c.tracer.Start(pctx, "fleet.reconcile")
	pass, err := c.fleet.Reconcile(pctx, c.listening.ListeningSince())
	cancel()
	span.SetAttributes(attribute.Int("fleet.nodes_lost", len(pass.LostNodes)), attribute.Int("fleet.replicas_moved", len(pass.Moved)),
		attribute.Int("fleet.replicas_removed", pass.Removed), attribute.Int("fleet.replicas_placed", pass.Placed),
		attribute.Int("fleet.replicas_preempted", pass.Preempted), attribute.Int("fleet.replicas_unplaced", pass.Unplaced),
		attribute.Int("fleet.desired_written", pass.DesiredWritten), attribute.Int("fleet.routes_written", pass.RoutesWritten))
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
	switch {
	case err != nil && ctx.Err() == nil:
		c.log.Warn("fleet reconcile", slog.String("error", err.Error()))
	case err == nil && pass.Wrote() && c.published != nil:
		c.published()
	}
}
