package idempotency

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/coder/quartz"
	"github.com/jackc/pgx/v5/pgxpool"

	"modelplane/db"
	"modelplane/service"
)

// Store holds the records, one per owner (who sent the request) and key.
type Store struct {
	pool *pgxpool.Pool
}

// New returns the store in pool.
func New(pool *pgxpool.Pool) *Store { return &Store{pool: pool} }

// Record is what a first request left for its retries.
type Record struct {
	// RequestHash identifies the request (method, path, body): a retry
	// with another hash is a different request under the same key.
	RequestHash []byte
	// Status is the stored response's status; 0 while the first request
	// is still running.
	Status      int
	ContentType string
	Location    string
	Body        []byte
}

// Begin claims key for owner. It reports false when a record already
// exists: the key is a retry of a finished request or of one in progress.
func (s *Store) Begin(ctx context.Context, owner, key string) (bool, error) {
	n, err := db.New(s.pool).IdempotencyBegin(ctx, db.IdempotencyBeginParams{Principal: owner, Key: key})
	if err != nil {
		return false, fmt.Errorf("idempotency key: %w", err)
	}
	return n > 0, nil
}

// Get returns owner's record of key; errdefs.ErrNotFound when there is none
// (it was aborted or swept meanwhile).
func (s *Store) Get(ctx context.Context, owner, key string) (Record, error) {
	r, err := db.New(s.pool).IdempotencyGet(ctx, db.IdempotencyGetParams{Principal: owner, Key: key})
	if err != nil {
		return Record{}, fmt.Errorf("idempotency key: %w", err)
	}
	return Record{RequestHash: r.RequestHash, Status: int(r.Status), ContentType: r.ContentType, Location: r.Location, Body: r.Body}, nil
}

// Finish stores the response of the request that claimed key.
func (s *Store) Finish(ctx context.Context, owner, key string, r Record) error {
	err := db.New(s.pool).IdempotencyFinish(ctx, db.IdempotencyFinishParams{Principal: owner, Key: key, RequestHash: r.RequestHash,
		Status: int32(r.Status), ContentType: r.ContentType, Location: r.Location, Body: r.Body})
	if err != nil {
		return fmt.Errorf("store idempotency record: %w", err)
	}
	return nil
}

// Abort releases a claim whose request left nothing to replay (it failed,
// or its body was not read to the end), so that a retry runs again. A
// finished record is kept.
func (s *Store) Abort(ctx context.Context, owner, key string) error {
	return db.New(s.pool).IdempotencyAbort(ctx, db.IdempotencyAbortParams{Principal: owner, Key: key})
}

// SweepBatch bounds the records one statement of Sweep deletes.
const SweepBatch = 1000

// Sweep deletes the records created before before, SweepBatch at a time
// (each batch its own statement, so no delete locks or logs a whole day of
// records at once), and returns how many. It stops when a batch comes back
// short or ctx ends.
func (s *Store) Sweep(ctx context.Context, before time.Time) (int64, error) {
	var total int64
	for {
		n, err := db.New(s.pool).IdempotencyDeleteOld(ctx, db.IdempotencyDeleteOldParams{Before: before, BatchSize: SweepBatch})
		total += n
		if err != nil {
			return total, fmt.Errorf("sweep idempotency keys: %w", err)
		}
		if n < SweepBatch {
			return total, nil
		}
	}
}

// Retention is how long an Idempotency-Key record is kept: a retry later
// than this runs the request again.
const Retention = 24 * time.Hour

// SweepInterval is how often the sweeper removes expired records.
const SweepInterval = 5 * time.Minute

// Sweeper returns the Service that removes records older than Retention
// every SweepInterval of clock (quartz.NewReal() when nil). Every control
// plane may run one: the delete is idempotent.
func (s *Store) Sweeper(log *slog.Logger, clock quartz.Clock) service.Service {
	if clock == nil {
		clock = quartz.NewReal()
	}
	return service.NewFunc(func(ctx context.Context) {
		service.Tick(ctx, clock, SweepInterval, nil, func(ctx context.Context) {
			if _, err := s.Sweep(ctx, clock.Now().Add(-Retention)); err != nil && ctx.Err() == nil {
				log.Warn("sweep idempotency keys", slog.String("error", err.Error()))
			}
		})
	})
}
