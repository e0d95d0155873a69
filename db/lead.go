package db

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Lead runs fn while this process holds the session-level advisory lock
// lockID, so that a loop runs once however many control-plane replicas there
// are. It tries for the lock every retry interval; fn's context is cancelled
// when the connection holding the lock fails (another replica may then take
// over) and Lead tries again. It returns when ctx ends.
func Lead(ctx context.Context, pool *pgxpool.Pool, lockID int64, retry time.Duration, fn func(ctx context.Context)) {
	for ctx.Err() == nil {
		lead(ctx, pool, lockID, retry, fn)
		select {
		case <-ctx.Done():
		case <-time.After(retry):
		}
	}
}

func lead(ctx context.Context, pool *pgxpool.Pool, lockID int64, retry time.Duration, fn func(ctx context.Context)) {
	pc, err := pool.Acquire(ctx)
	if err != nil {
		return
	}
	// The lock belongs to this connection's session: take the connection out
	// of the pool so that it is never handed to anyone else holding the lock.
	conn := pc.Hijack()
	defer conn.Close(context.Background())
	var got bool
	if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", lockID).Scan(&got); err != nil || !got {
		return
	}
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(lctx)
	}()
	t := time.NewTicker(retry)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
			pctx, pcancel := context.WithTimeout(ctx, retry)
			err := conn.Ping(pctx)
			pcancel()
			if err != nil {
				cancel()
				<-done
				return
			}
		}
	}
}
