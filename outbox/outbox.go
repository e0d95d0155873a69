// Package outbox publishes the outbox table to NATS. Domain changes write an
// outbox row in their own transaction (DESIGN.md section 4); the relay here
// publishes the rows in id order through JetStream with the row id as
// Nats-Msg-Id, so a row published twice (a relay that died before marking
// it) is stored once. It owns no domain logic: a row is a subject and a
// payload. A JSON null payload on a KV subject deletes the key.
package outbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/coder/quartz"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"modelplane/busapi"
	"modelplane/db"
	"modelplane/service"
)

// Relay publishes unpublished outbox rows.
type Relay struct {
	service.Runner
	clock     quartz.Clock
	lastSweep time.Time
	pool      *pgxpool.Pool
	js        jetstream.JetStream
	log       *slog.Logger
	wake      chan struct{}
}

// NewRelay returns a Relay that polls and sweeps on clock
// (quartz.NewReal() when nil).
func NewRelay(pool *pgxpool.Pool, js jetstream.JetStream, log *slog.Logger, clock quartz.Clock) *Relay {
	if clock == nil {
		clock = quartz.NewReal()
	}
	return &Relay{clock: clock, pool: pool, js: js, log: log, wake: make(chan struct{}, 1)}
}

// Wake makes a running relay look for rows now rather than at its next tick.
func (r *Relay) Wake() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Interval is how often a running relay looks for rows nobody woke it for
// (a wake-up from another process).
const Interval = 250 * time.Millisecond

// Start publishes in the background until Stop: whenever woken, and every
// Interval. Published rows older than a day are deleted every hour. Run it
// under a leader lease (db.Lease): rows must leave in id order.
func (r *Relay) Start(ctx context.Context) error {
	return r.Go(ctx, func(ctx context.Context) { service.Tick(ctx, r.clock, Interval, r.wake, r.round) })
}

func (r *Relay) round(ctx context.Context) {
	if _, err := r.Flush(ctx); err != nil && ctx.Err() == nil {
		r.log.Warn("outbox relay", slog.String("error", err.Error()))
	}
	if now := r.clock.Now(); now.Sub(r.lastSweep) > time.Hour {
		if _, err := db.New(r.pool).OutboxDeletePublished(ctx, now.Add(-24*time.Hour)); err == nil {
			r.lastSweep = now
		}
	}
}

// Flush publishes every pending row, oldest first, and returns how many it
// published. It stops at the first row NATS does not take, so that a key's
// values are never published out of order; the rest wait for the next call.
// A row NATS refuses for good (see refused) is settled with its error
// instead, logged, and passed over: waiting could never publish it, and it
// would hold back every row after it — routing entries included. A later
// row of the same key supersedes it anyway.
func (r *Relay) Flush(ctx context.Context) (int, error) {
	q := db.New(r.pool)
	total := 0
	for {
		rows, err := q.OutboxPending(ctx, 500)
		if err != nil {
			return total, fmt.Errorf("outbox pending: %w", err)
		}
		if len(rows) == 0 {
			return total, nil
		}
		var done []int64
		var pubErr error
		for _, row := range rows {
			pubErr = r.publish(ctx, row)
			if pubErr != nil && refused(pubErr) {
				r.log.Error("outbox row refused by NATS; passed over", slog.Int64("id", row.ID),
					slog.String("subject", row.Subject), slog.String("error", pubErr.Error()))
				msg := pubErr.Error()
				if err := q.OutboxMarkRefused(ctx, db.OutboxMarkRefusedParams{ID: row.ID, Error: &msg}); err != nil {
					return total, fmt.Errorf("outbox mark refused: %w", err)
				}
				continue
			}
			if pubErr != nil {
				break
			}
			done = append(done, row.ID)
		}
		if len(done) > 0 {
			if err := q.OutboxMarkPublishedMany(ctx, done); err != nil {
				return total, fmt.Errorf("outbox mark published: %w", err)
			}
			total += len(done)
		}
		if pubErr != nil {
			return total, pubErr
		}
	}
}

// refused tells the errors that no retry can cure from those that pass (NATS
// down, a stream not created yet, a timeout).
func refused(err error) bool {
	if errors.Is(err, nats.ErrMaxPayload) {
		return true
	}
	var api *jetstream.APIError
	return errors.As(err, &api) && (api.ErrorCode == jetstream.JSErrCodeStreamMessageExceedsMaximum || api.ErrorCode == jetstream.JSErrCodeBadRequest)
}

func (r *Relay) publish(ctx context.Context, row db.Outbox) error {
	m := nats.NewMsg(row.Subject)
	m.Header.Set(jetstream.MsgIDHeader, "outbox-"+strconv.FormatInt(row.ID, 10))
	if _, _, isKV := busapi.KVKey(row.Subject); isKV && bytes.Equal(bytes.TrimSpace(row.Payload), []byte("null")) {
		m.Header.Set("KV-Operation", "DEL")
	} else {
		m.Data = row.Payload
	}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := r.js.PublishMsg(pctx, m); err != nil {
		return fmt.Errorf("publish outbox %d to %s: %w", row.ID, row.Subject, err)
	}
	return nil
}
