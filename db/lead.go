package db

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"modelplane/service"
)

// LeaseRetry is how often a Lease tries for its lock and checks that the
// connection holding it is alive.
const LeaseRetry = 2 * time.Second

// Lease runs a Service only while this process holds the session-level
// advisory lock of its id, so that a loop runs once however many
// control-plane replicas there are. It is the one lease helper of the
// control plane: every leader-only loop is wrapped in one. Its Service is
// started when the lock is taken and stopped when the connection holding it
// fails (another replica may then take over) or the Lease stops; so a
// leader-only Service must be restartable.
type Lease struct {
	service.Runner
	pool  *pgxpool.Pool
	id    int64
	inner service.Service
	log   *slog.Logger
}

// NewLease returns a Lease of lock id over inner.
func NewLease(pool *pgxpool.Pool, id int64, inner service.Service, log *slog.Logger) *Lease {
	return &Lease{pool: pool, id: id, inner: inner, log: log}
}

// Start begins trying for the lock in the background.
func (l *Lease) Start(ctx context.Context) error {
	return l.Go(ctx, func(ctx context.Context) {
		for ctx.Err() == nil {
			l.term(ctx)
			select {
			case <-ctx.Done():
			case <-time.After(LeaseRetry):
			}
		}
	})
}

// term holds the lock for one leadership term, if it can get it.
func (l *Lease) term(ctx context.Context) {
	pc, err := l.pool.Acquire(ctx)
	if err != nil {
		return
	}
	// The lock belongs to this connection's session: take the connection out
	// of the pool so that it is never handed to anyone else holding the lock.
	conn := pc.Hijack()
	defer conn.Close(context.Background())
	var got bool
	if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", l.id).Scan(&got); err != nil || !got {
		return
	}
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if err := l.inner.Start(lctx); err != nil {
		if ctx.Err() == nil {
			l.log.Warn("start leader loop", slog.String("loop", fmt.Sprintf("%T", l.inner)), slog.String("error", err.Error()))
		}
		return
	}
	defer l.inner.Stop()
	t := time.NewTicker(LeaseRetry)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			pctx, pcancel := context.WithTimeout(ctx, LeaseRetry)
			err := conn.Ping(pctx)
			pcancel()
			if err != nil {
				return
			}
		}
	}
}
