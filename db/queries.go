package db

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// sqlc writes its DBTX, New, Queries and WithTx to _dbtx_gen.go (see
// sqlc.yaml), a name the go tool ignores, and this file declares them
// instead: New must wrap what it is given so that every generated query
// returns interpreted errors, and sqlc has no hook for that. The declarations
// keep sqlc's shape (a Queries with a db field the generated methods call),
// so a sqlc upgrade that changes it fails to compile here rather than
// silently bypassing the interpreter.

// DBTX is what queries run on: a pool, a connection or a transaction.
type DBTX interface {
	Exec(context.Context, string, ...interface{}) (pgconn.CommandTag, error)
	Query(context.Context, string, ...interface{}) (pgx.Rows, error)
	QueryRow(context.Context, string, ...interface{}) pgx.Row
}

// Queries runs the generated queries on one DBTX.
type Queries struct {
	db DBTX
}

// New returns the queries on db. Every error they return has been through
// the interpreter: pgx.ErrNoRows is ErrNotFound, a unique violation wraps
// ErrConflict (and the *pgconn.PgError, for callers that read its code), and
// anything else is the driver's error unchanged.
func New(db DBTX) *Queries {
	if _, ok := db.(interpreting); !ok {
		db = interpreting{db}
	}
	return &Queries{db: db}
}

// WithTx returns the queries on tx, interpreted like New's.
func (q *Queries) WithTx(tx pgx.Tx) *Queries {
	return New(tx)
}

// interpret maps a driver error to this package's sentinels. It is applied
// once, by the DBTX wrapper and by InTx; applying it again changes nothing.
func interpret(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return ErrNotFound
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" && !errors.Is(err, ErrConflict) {
		return &conflictError{pg: pgErr, err: err}
	}
	return err
}

// conflictError is a unique violation: it is ErrConflict to errors.Is and
// still the driver's error (its *pgconn.PgError) to errors.As. Its message
// names the constraint, not the row's values, which the driver's message
// would show.
type conflictError struct {
	pg  *pgconn.PgError
	err error
}

func (e *conflictError) Error() string {
	return fmt.Sprintf("%s: %s", ErrConflict, e.pg.ConstraintName)
}

func (e *conflictError) Unwrap() []error { return []error{ErrConflict, e.err} }

// interpreting is the DBTX every Queries runs on: it passes each call to the
// pool, connection or transaction underneath and interprets the errors, both
// those returned at once and those pgx defers to Row.Scan and Rows.Err.
type interpreting struct{ db DBTX }

func (d interpreting) Exec(ctx context.Context, sql string, args ...interface{}) (pgconn.CommandTag, error) {
	tag, err := d.db.Exec(ctx, sql, args...)
	return tag, interpret(err)
}

func (d interpreting) Query(ctx context.Context, sql string, args ...interface{}) (pgx.Rows, error) {
	rows, err := d.db.Query(ctx, sql, args...)
	if err != nil {
		return nil, interpret(err)
	}
	return interpretingRows{rows}, nil
}

func (d interpreting) QueryRow(ctx context.Context, sql string, args ...interface{}) pgx.Row {
	return interpretingRow{d.db.QueryRow(ctx, sql, args...)}
}

type interpretingRow struct{ row pgx.Row }

func (r interpretingRow) Scan(dest ...any) error { return interpret(r.row.Scan(dest...)) }

// interpretingRows interprets what a query's rows report: a statement that
// fails while streaming (an INSERT ... RETURNING hitting a unique index)
// surfaces from Err, not from Query.
type interpretingRows struct{ pgx.Rows }

func (r interpretingRows) Err() error { return interpret(r.Rows.Err()) }

func (r interpretingRows) Scan(dest ...any) error { return interpret(r.Rows.Scan(dest...)) }
