package db_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"modelplane/db"
	"modelplane/errdefs"
	"modelplane/internal/pgtest"
)

// TestNoRowsIsNotFound: whichever way a query reaches the database (the
// pool, a transaction of InTx, one of pool.Begin through WithTx), a missing
// row is ErrNotFound and pgx.ErrNoRows never reaches the caller.
func TestNoRowsIsNotFound(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.New(t)
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	tests := []struct {
		name string
		get  func() error
	}{
		{"pool", func() error { _, err := db.New(pool).TeamGetByName(ctx, "missing"); return err }},
		{"InTx", func() error {
			return db.InTx(ctx, pool, func(q *db.Queries) error { _, err := q.TeamGetByName(ctx, "missing"); return err })
		}},
		{"WithTx", func() error { _, err := db.New(pool).WithTx(tx).TeamGetByName(ctx, "missing"); return err }},
		{"New on a transaction", func() error { _, err := db.New(tx).TeamGetByName(ctx, "missing"); return err }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.get()
			if !errors.Is(err, db.ErrNotFound) || !errors.Is(err, errdefs.ErrNotFound) {
				t.Fatalf("err = %v, want ErrNotFound", err)
			}
			if errors.Is(err, pgx.ErrNoRows) {
				t.Errorf("err = %v still matches pgx.ErrNoRows", err)
			}
		})
	}
}

// TestUniqueViolationIsConflict: a unique violation is ErrConflict naming
// the constraint, from QueryRow's Scan, from Exec, from Rows.Err and through
// InTx, and stays the driver's *pgconn.PgError for callers reading its code.
func TestUniqueViolationIsConflict(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.New(t)
	q := db.New(pool)
	if _, err := q.TeamCreate(ctx, db.TeamCreateParams{Name: "risk"}); err != nil {
		t.Fatal(err)
	}
	login := db.OIDCLoginInsertParams{State: "s1", Nonce: "n", CodeVerifier: "v", ReturnTo: "/", CreatedAt: time.Now()}
	if err := q.OIDCLoginInsert(ctx, login); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		constraint string
		write      func() error
	}{
		{"QueryRow", "teams_name_key", func() error {
			_, err := q.TeamCreate(ctx, db.TeamCreateParams{Name: "risk"})
			return err
		}},
		{"Exec", "oidc_logins_pkey", func() error { return q.OIDCLoginInsert(ctx, login) }},
		{"Rows", "teams_name_key", func() error {
			// The second row fails while the result streams: pgx reports
			// it from Rows.Err, not from Query.
			rows, err := db.Interpreting(pool).Query(ctx, "INSERT INTO teams (name) VALUES ('search'), ('search') RETURNING id")
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
			}
			return rows.Err()
		}},
		{"InTx", "teams_name_key", func() error {
			return db.InTx(ctx, pool, func(q *db.Queries) error {
				_, err := q.TeamCreate(ctx, db.TeamCreateParams{Name: "risk"})
				return err
			})
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.write()
			if !errors.Is(err, db.ErrConflict) || !errors.Is(err, errdefs.ErrConflict) {
				t.Fatalf("err = %v, want ErrConflict", err)
			}
			if got, want := err.Error(), "already exists: "+tt.constraint; got != want {
				t.Errorf("message = %q, want %q", got, want)
			}
			var pgErr *pgconn.PgError
			if !errors.As(err, &pgErr) || pgErr.Code != "23505" || pgErr.ConstraintName != tt.constraint {
				t.Errorf("errors.As(*pgconn.PgError) = %v, want code 23505 on %s", pgErr, tt.constraint)
			}
		})
	}
}

// TestOtherErrorsStayTheDrivers: a foreign-key or check violation is
// neither sentinel and keeps its SQLSTATE for callers that branch on it.
func TestOtherErrorsStayTheDrivers(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	q := db.New(pgtest.New(t))
	tests := []struct {
		name string
		code string
		run  func() error
	}{
		{"foreign key", "23503", func() error {
			return q.SessionInsert(ctx, db.SessionInsertParams{IDHash: []byte("x"), UserID: 999, CsrfToken: "c",
				Now: time.Now(), ExpiresAt: time.Now().Add(time.Hour)})
		}},
		{"check", "23514", func() error {
			_, err := q.TeamCreate(ctx, db.TeamCreateParams{Name: "Not A Name"})
			return err
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.run()
			if errors.Is(err, db.ErrConflict) || errors.Is(err, db.ErrNotFound) {
				t.Fatalf("err = %v matches a sentinel", err)
			}
			var pgErr *pgconn.PgError
			if !errors.As(err, &pgErr) || pgErr.Code != tt.code {
				t.Fatalf("err = %v, want a *pgconn.PgError with code %s", err, tt.code)
			}
		})
	}
}
