package app

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"modelplane/bus"
	"modelplane/db"
	"modelplane/fleet"
	"modelplane/outbox"
)

// Advisory-lock ids of the loops that run once per control plane.
const (
	leadFleet  = 7_316_020_010
	leadOutbox = 7_316_020_011
)

// startLoops starts the control plane's background work: the JetStream
// buckets and streams, heartbeat intake (every replica), and the fleet
// reconciler and outbox relay (one leader each). The returned stop waits for
// all of it.
func (cp controlPlane) startLoops(ctx context.Context) (stop func(), err error) {
	js, err := jetstream.New(cp.NC)
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	ectx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err = bus.Ensure(ectx, js)
	cancel()
	if err != nil {
		return nil, err
	}
	ctx, cancel = context.WithCancel(ctx)
	f := fleet.New(cp.Pool, cp.Log, time.Now)
	relay := outbox.NewRelay(cp.Pool, js, cp.Log)
	ctl := fleet.NewController(f, cp.Log, time.Second, time.Now(), relay.Wake)
	intake := fleet.NewIntake(f, cp.NC, cp.Log, ctl.Wake)
	if err := intake.Start(ctx); err != nil {
		cancel()
		return nil, err
	}
	var wg sync.WaitGroup
	wg.Go(func() { db.Lead(ctx, cp.Pool, leadFleet, 2*time.Second, ctl.Run) })
	wg.Go(func() {
		db.Lead(ctx, cp.Pool, leadOutbox, 2*time.Second, func(ctx context.Context) { relay.Run(ctx, 250*time.Millisecond) })
	})
	return func() {
		cancel()
		intake.Stop()
		wg.Wait()
	}, nil
}
