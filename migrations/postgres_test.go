package migrations_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"modelplane/db"
	"modelplane/internal/pgtest"
	"modelplane/migrations"
)

var emptySeq atomic.Int64

// emptyDB returns a pool on a new database with no migrations applied, on
// the test server pgtest runs.
func emptyDB(t *testing.T) *pgxpool.Pool {
	t.Helper()
	ctx := t.Context()
	admin := pgtest.New(t)
	name := fmt.Sprintf("empty_%d_%d", os.Getpid(), emptySeq.Add(1))
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("create database: %v", err)
	}
	cfg := admin.Config().ConnConfig.Copy()
	url := fmt.Sprintf("postgres://%s@%s:%d/%s?sslmode=disable", cfg.User, cfg.Host, cfg.Port, name)
	pool, err := db.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// schema describes every column, constraint, index and trigger of the public
// schema, and the migrations recorded, so two states can be compared.
func schema(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	rows, err := pool.Query(t.Context(), `
		SELECT 'column ' || table_name || '.' || column_name || ' ' || data_type || ' ' || is_nullable || ' ' || coalesce(column_default, '')
		FROM information_schema.columns WHERE table_schema = 'public'
		UNION ALL
		SELECT 'constraint ' || conrelid::regclass || ' ' || pg_get_constraintdef(oid) FROM pg_constraint WHERE connamespace = 'public'::regnamespace
		UNION ALL
		SELECT 'index ' || indexdef FROM pg_indexes WHERE schemaname = 'public'
		UNION ALL
		SELECT 'trigger ' || tgrelid::regclass || ' ' || tgname FROM pg_trigger WHERE NOT tgisinternal
		UNION ALL
		SELECT 'migration ' || version || ' ' || name || ' ' || applied_at FROM schema_migrations
		ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		lines = append(lines, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return strings.Join(lines, "\n")
}

func TestPostgresTwiceIsNoOp(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t) // migrated once already
	ctx := t.Context()
	if _, err := pool.Exec(ctx, "INSERT INTO teams (name) VALUES ('risk')"); err != nil {
		t.Fatal(err)
	}
	before := schema(t, pool)
	for i := range 2 {
		if err := migrations.Postgres(ctx, pool); err != nil {
			t.Fatalf("Postgres (run %d): %v", i+2, err)
		}
	}
	if after := schema(t, pool); after != before {
		t.Errorf("schema after applying again differs:\n got %s\nwant %s", after, before)
	}
	var n int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM teams").Scan(&n); err != nil || n != 1 {
		t.Errorf("teams after applying again = %d, %v; want the 1 row kept", n, err)
	}
}

func TestPostgresFromEmptyConcurrently(t *testing.T) {
	t.Parallel()
	pool := emptyDB(t)
	ctx := t.Context()
	// Several replicas starting at once: the advisory lock serialises them
	// and each migration is applied exactly once.
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = migrations.Postgres(ctx, pool)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("migrator %d: %v", i, err)
		}
	}
	var applied, distinct int
	if err := pool.QueryRow(ctx, "SELECT count(*), count(DISTINCT version) FROM schema_migrations").Scan(&applied, &distinct); err != nil {
		t.Fatal(err)
	}
	if applied == 0 || applied != distinct {
		t.Errorf("schema_migrations rows = %d (%d distinct), want each migration once", applied, distinct)
	}
	before := schema(t, pool)
	if err := migrations.Postgres(ctx, pool); err != nil {
		t.Fatalf("Postgres again: %v", err)
	}
	if after := schema(t, pool); after != before {
		t.Errorf("schema after applying again differs:\n got %s\nwant %s", after, before)
	}
	// The fresh database matches the harness's template.
	if got, want := stripApplied(before), stripApplied(schema(t, pgtest.New(t))); got != want {
		t.Errorf("schema from empty differs from the template's:\n got %s\nwant %s", got, want)
	}
}

func stripApplied(s string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, "migration ") {
			f := strings.Fields(l)
			l = strings.Join(f[:3], " ")
		}
		out = append(out, l)
	}
	return strings.Join(out, "\n")
}

// versionFixture inserts a team, a model and one version and returns the
// version id.
func versionFixture(t *testing.T, ctx context.Context, pool *pgxpool.Pool) int64 {
	t.Helper()
	var id int64
	err := pool.QueryRow(ctx, `
		WITH t AS (INSERT INTO teams (name) VALUES ('risk') RETURNING id),
		     m AS (INSERT INTO models (team_id, name, task) SELECT id, 'fraud', 'classification' FROM t RETURNING id, team_id)
		INSERT INTO model_versions (model_id, team_id, name, format, runtime, artifact_uri, manifest, p99_latency_ms, sim_profile)
		SELECT m.id, m.team_id, 'v1', 'onnx', 'triton', 's3://b/v1', '{"model.onnx":"00"}', 50, '{"a":1}' FROM m
		RETURNING id`).Scan(&id)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func TestModelVersionsImmutable(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	ctx := t.Context()
	id := versionFixture(t, ctx, pool)
	if _, err := pool.Exec(ctx, "INSERT INTO teams (name) VALUES ('search')"); err != nil {
		t.Fatal(err)
	}
	// One changed value per column; every column but status must be refused.
	changes := map[string]string{
		"id":                 "id + 1000",
		"model_id":           "model_id + 1000",
		"team_id":            "(SELECT id FROM teams WHERE name = 'search')",
		"name":               "'v2'",
		"format":             "'gguf'",
		"runtime":            "'vllm'",
		"artifact_uri":       "'s3://b/other'",
		"manifest":           `'{"model.onnx":"11"}'`,
		"size_bytes":         "size_bytes + 1",
		"gpu_count":          "gpu_count + 1",
		"gpu_memory_mb":      "gpu_memory_mb + 1",
		"gpu_type":           "'H100-80GB'",
		"cpu_cores":          "cpu_cores + 1",
		"memory_mb":          "memory_mb + 1",
		"p99_latency_ms":     "NULL",
		"p99_tpot_ms":        "10",
		"parent_version":     "'v0'",
		"training_job":       "'job-9'",
		"dataset":            "'ds-9'",
		"offline_metrics":    `'{"auc":0.9}'`,
		"sim_profile":        "NULL",
		"created_by":         "'mallory'",
		"created_by_user_id": "42",
		"created_by_key_id":  "42",
		"created_at":         "created_at - interval '1 day'",
		"serving":            `'{"output":{"threshold":0.9}}'`,
		"graph":              `'{"entry":"a","nodes":[]}'`,
	}
	// The table must not grow a column this test does not try to change;
	// memory_need_mb, written once, has its own test below.
	cols, err := pool.Query(ctx, "SELECT column_name FROM information_schema.columns WHERE table_name = 'model_versions' AND column_name NOT IN ('status', 'memory_need_mb')")
	if err != nil {
		t.Fatal(err)
	}
	for cols.Next() {
		var c string
		if err := cols.Scan(&c); err != nil {
			t.Fatal(err)
		}
		if _, ok := changes[c]; !ok {
			t.Errorf("model_versions.%s has no change in this test; add one", c)
		}
	}
	if err := cols.Err(); err != nil {
		t.Fatal(err)
	}
	var before string
	if err := pool.QueryRow(ctx, "SELECT to_jsonb(v)::text FROM model_versions v WHERE id = $1", id).Scan(&before); err != nil {
		t.Fatal(err)
	}
	for col, expr := range changes {
		t.Run(col, func(t *testing.T) {
			_, err := pool.Exec(ctx, "UPDATE model_versions SET "+col+" = "+expr+" WHERE id = $1", id)
			if err == nil || !strings.Contains(err.Error(), "model versions are immutable") {
				t.Errorf("UPDATE SET %s = %s: error = %v, want 'model versions are immutable'", col, expr, err)
			}
		})
	}
	var after string
	if err := pool.QueryRow(ctx, "SELECT to_jsonb(v)::text FROM model_versions v WHERE id = $1", id).Scan(&after); err != nil {
		t.Fatal(err)
	}
	if after != before {
		t.Errorf("row after refused updates = %s, want unchanged %s", after, before)
	}

	// status changes, alone or with unchanged columns.
	for _, q := range []string{
		"UPDATE model_versions SET status = 'retired' WHERE id = $1",
		"UPDATE model_versions SET status = 'active', name = name, manifest = manifest WHERE id = $1",
	} {
		tag, err := pool.Exec(ctx, q, id)
		if err != nil || tag.RowsAffected() != 1 {
			t.Errorf("%s: %v, %d rows; want 1 row updated", q, err, tag.RowsAffected())
		}
	}
	var status string
	if err := pool.QueryRow(ctx, "SELECT status FROM model_versions WHERE id = $1", id).Scan(&status); err != nil || status != "active" {
		t.Errorf("status = %q, %v; want active", status, err)
	}
	// The memory need is written once, from 0, and never again.
	if tag, err := pool.Exec(ctx, "UPDATE model_versions SET memory_need_mb = 33 WHERE id = $1", id); err != nil || tag.RowsAffected() != 1 {
		t.Errorf("first memory_need_mb: %v, %d rows; want 1 row updated", err, tag.RowsAffected())
	}
	for _, v := range []string{"34", "0"} {
		if _, err := pool.Exec(ctx, "UPDATE model_versions SET memory_need_mb = "+v+" WHERE id = $1", id); err == nil || !strings.Contains(err.Error(), "model versions are immutable") {
			t.Errorf("memory_need_mb 33 → %s: error = %v, want 'model versions are immutable'", v, err)
		}
	}
	// A status change together with another column is refused as a whole.
	if _, err := pool.Exec(ctx, "UPDATE model_versions SET status = 'x', name = 'v9' WHERE id = $1", id); err == nil {
		t.Errorf("UPDATE status and name: no error, want immutable")
	}
	// Deleting the model still removes its versions (immutability is about updates).
	if _, err := pool.Exec(ctx, "DELETE FROM models"); err != nil {
		t.Errorf("DELETE FROM models: %v, want the cascade to remove versions", err)
	}
}
