package ingest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// pullLoop is the fetch loop of the small consumers (request statistics,
// prediction samples): a durable pull consumer with explicit acks, fetched
// in sets that store decodes, inserts and acks (or naks). Each consumer
// embeds one for Start, Stop and Run. The usage consumer, which must go
// much faster, has a loop of its own.
type pullLoop struct {
	name       string // in logs and errors: "reqstats", "predictions"
	js         jetstream.JetStream
	stream     string
	durable    string
	batch      int
	maxDeliver int
	maxWait    time.Duration
	ackWait    time.Duration
	nakDelay   time.Duration
	// maxNakDelay bounds the wait after a failed fetch or store.
	maxNakDelay time.Duration
	timeout     time.Duration
	log         *slog.Logger
	store       func(ctx context.Context, msgs []jetstream.Msg) error

	mu  sync.Mutex
	run *usageRun // nil while stopped
}

// Start creates or updates the durable consumer and consumes in the
// background until ctx ends or Stop is called. It fails only when the
// consumer cannot be created; later failures are logged and retried. A
// stopped consumer can be started again.
func (c *pullLoop) Start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.run != nil {
		return fmt.Errorf("%s consumer: already started", c.name)
	}
	cctx, cancel := context.WithTimeout(ctx, c.timeout)
	_, err := c.ensureConsumer(cctx)
	cancel()
	if err != nil {
		return err
	}
	r := &usageRun{}
	ctx, r.cancel = context.WithCancel(ctx)
	r.wg.Go(func() { c.loop(ctx) })
	c.run = r
	return nil
}

// Stop stops consuming and waits for the insert under way, if any.
func (c *pullLoop) Stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.run == nil {
		return
	}
	c.run.cancel()
	c.run.wg.Wait()
	c.run = nil
}

// Run consumes until ctx ends, then stops: the form a leader lease wants.
func (c *pullLoop) Run(ctx context.Context) error {
	if err := c.Start(ctx); err != nil {
		return err
	}
	<-ctx.Done()
	c.Stop()
	return nil
}

func (c *pullLoop) ensureConsumer(ctx context.Context) (jetstream.Consumer, error) {
	cons, err := c.js.CreateOrUpdateConsumer(ctx, c.stream, jetstream.ConsumerConfig{
		Durable:       c.durable,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       c.ackWait,
		MaxDeliver:    c.maxDeliver,
		MaxAckPending: 10 * c.batch,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	})
	if err != nil {
		return nil, fmt.Errorf("%s consumer %s on %s: %w", c.name, c.durable, c.stream, err)
	}
	return cons, nil
}

// loop fetches and stores sets of messages until ctx ends. After a failed
// fetch or insert it waits, growing the wait up to MaxNakDelay.
func (c *pullLoop) loop(ctx context.Context) {
	var cons jetstream.Consumer
	backoff := time.Duration(0)
	for ctx.Err() == nil {
		if backoff > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
		}
		if cons == nil {
			cctx, cancel := context.WithTimeout(ctx, c.timeout)
			var err error
			cons, err = c.ensureConsumer(cctx)
			cancel()
			if err != nil {
				c.log.Warn(c.name+" consumer", "err", err)
				backoff = min(max(2*backoff, 100*time.Millisecond), c.maxNakDelay)
				continue
			}
		}
		batch, err := cons.Fetch(c.batch, jetstream.FetchMaxWait(c.maxWait))
		if err != nil {
			if ctx.Err() == nil {
				c.log.Warn("fetch "+c.name, "err", err)
			}
			cons = nil
			backoff = min(max(2*backoff, 100*time.Millisecond), c.maxNakDelay)
			continue
		}
		var msgs []jetstream.Msg
		for m := range batch.Messages() {
			msgs = append(msgs, m)
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) && ctx.Err() == nil {
			c.log.Debug("fetch "+c.name, "err", err)
		}
		if len(msgs) == 0 {
			backoff = 0
			continue
		}
		// An insert under way when Stop comes is finished, not abandoned.
		if err := c.store(context.WithoutCancel(ctx), msgs); err != nil {
			backoff = min(max(2*backoff, c.nakDelay), c.maxNakDelay)
			continue
		}
		backoff = 0
	}
}
