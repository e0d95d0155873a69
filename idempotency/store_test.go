package idempotency_test

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"modelplane/errdefs"
	"modelplane/idempotency"
	"modelplane/internal/pgtest"
)

// TestRecordLifecycle: a key is claimed once per owner, is in progress
// (status 0) until finished, then returns what was stored; abort releases
// only an unfinished claim.
func TestRecordLifecycle(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := idempotency.New(pgtest.New(t))
	claim := func(owner, key string, want bool) {
		t.Helper()
		got, err := s.Begin(ctx, owner, key)
		if err != nil || got != want {
			t.Fatalf("Begin(%s, %s) = %v, %v; want %v", owner, key, got, err, want)
		}
	}
	claim("session:ann", "k1", true)
	claim("session:ann", "k1", false)
	claim("api-key:mpk_1", "k1", true) // keys are per owner
	if r, err := s.Get(ctx, "session:ann", "k1"); err != nil || r.Status != 0 {
		t.Fatalf("Get in progress = %+v, %v; want status 0", r, err)
	}
	want := idempotency.Record{RequestHash: []byte{1, 2}, Status: 201, ContentType: "application/json", Location: "/api/v1/models/m", Body: []byte(`{"name":"m"}`)}
	if err := s.Finish(ctx, "session:ann", "k1", want); err != nil {
		t.Fatal(err)
	}
	if err := s.Abort(ctx, "session:ann", "k1"); err != nil {
		t.Fatal(err)
	}
	got, err := s.Get(ctx, "session:ann", "k1")
	if err != nil {
		t.Fatalf("Get after Finish and Abort: %v; want the finished record kept", err)
	}
	if !bytes.Equal(got.RequestHash, want.RequestHash) || got.Status != want.Status || got.ContentType != want.ContentType ||
		got.Location != want.Location || !bytes.Equal(got.Body, want.Body) {
		t.Errorf("Get = %+v, want %+v", got, want)
	}
	if err := s.Abort(ctx, "api-key:mpk_1", "k1"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, "api-key:mpk_1", "k1"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Get after aborting an unfinished claim: err = %v, want ErrNotFound", err)
	}
	claim("api-key:mpk_1", "k1", true) // released: a retry runs again
}

// TestSweep deletes the records created before the cutoff only.
func TestSweep(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := idempotency.New(pgtest.New(t))
	for _, k := range []string{"a", "b"} {
		if _, err := s.Begin(ctx, "session:ann", k); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := s.Sweep(ctx, time.Now().Add(-time.Hour)); err != nil || n != 0 {
		t.Fatalf("Sweep(an hour ago) = %d, %v; want 0", n, err)
	}
	if n, err := s.Sweep(ctx, time.Now().Add(time.Hour)); err != nil || n != 2 {
		t.Fatalf("Sweep(in an hour) = %d, %v; want 2", n, err)
	}
	if _, err := s.Get(ctx, "session:ann", "a"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Get after Sweep: err = %v, want ErrNotFound", err)
	}
}

// TestSweepInBatches: more expired records than one batch holds are all
// removed, SweepBatch per statement, and the records still in force stay.
func TestSweepInBatches(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.New(t)
	s := idempotency.New(pool)
	const old = 2*idempotency.SweepBatch + 500
	if _, err := pool.Exec(ctx, `INSERT INTO idempotency_keys (principal, key, request_hash, status, content_type, body, created_at)
		SELECT 'session:ann', 'old-' || i, '', 200, 'application/json', '', now() - interval '2 days' FROM generate_series(1, $1::int) i`, old); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Begin(ctx, "session:ann", "fresh"); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Sweep(ctx, time.Now().Add(-idempotency.Retention)); err != nil || n != old {
		t.Fatalf("Sweep = %d, %v; want all %d expired records", n, err, old)
	}
	var left int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM idempotency_keys").Scan(&left); err != nil || left != 1 {
		t.Fatalf("%d records left (%v); want only the fresh one", left, err)
	}
}
