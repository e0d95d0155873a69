// Package db is the PostgreSQL access layer: sqlc-generated queries (the
// *.sql.go and *_gen.go files, from queries/ and migrations/postgres/) plus
// the few helpers every domain package uses. It holds no business rules;
// callers turn its rows into domain types.
//
// Every query runs through one error interpreter (see New): callers see
// ErrNotFound instead of pgx.ErrNoRows and ErrConflict for a unique
// violation, and never need to translate driver errors themselves.
package db

import (
	"context"
	"fmt"
	"runtime"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"modelplane/errdefs"
)

// ErrNotFound means the row does not exist or is not visible to the caller's
// teams; callers cannot and must not tell the two apart. It is
// errdefs.ErrNotFound, so layers that do not import db branch on the same
// value.
var ErrNotFound = errdefs.ErrNotFound

// ErrConflict means a unique constraint refused the write. It is
// errdefs.ErrConflict.
var ErrConflict = errdefs.ErrConflict

// Open connects a pool and checks the server answers.
func Open(ctx context.Context, url string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("database url: %w", err)
	}
	// pgx defaults to max(4, CPUs) connections, which queues a busy API on a
	// small machine; many more only adds context switches on the database
	// (measured with modelplane bench api: 8 beat 4 and 16 on 2 cores).
	// pool_max_conns in the URL still wins.
	if !strings.Contains(url, "pool_max_conns") {
		cfg.MaxConns = int32(max(8, 4*runtime.NumCPU()))
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect postgres: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connect postgres: %w", err)
	}
	return pool, nil
}

// InTx runs fn in one transaction and commits when fn returns nil. Errors of
// fn's queries are already interpreted; those of BEGIN and COMMIT (a
// deferred unique constraint fails at COMMIT) are interpreted here.
func InTx(ctx context.Context, pool *pgxpool.Pool, fn func(q *Queries) error) error {
	return interpret(pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return fn(New(tx)) }))
}
