// Package pgtest gives each test a fresh, migrated PostgreSQL database cloned
// from a template, on one private server per test process (internal/pgproc).
package pgtest

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"modelplane/db"
	"modelplane/internal/pgproc"
	"modelplane/migrations"
)

var (
	once    sync.Once
	server  *pgproc.Server
	baseDir string
	initErr error
	seq     atomic.Int64
	mu      sync.Mutex // CREATE DATABASE ... TEMPLATE needs the template idle
)

const template = "mp_template"

func start() {
	ctx := context.Background()
	baseDir, initErr = os.MkdirTemp("", "pgtest-")
	if initErr != nil {
		return
	}
	os.Chmod(baseDir, 0o755)
	server, initErr = pgproc.Start(ctx, baseDir+"/data")
	if initErr != nil {
		return
	}
	admin, err := db.Open(ctx, server.URL("postgres"))
	if err != nil {
		initErr = err
		return
	}
	defer admin.Close()
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+template); err != nil {
		initErr = err
		return
	}
	pool, err := db.Open(ctx, server.URL(template))
	if err != nil {
		initErr = err
		return
	}
	initErr = migrations.Postgres(ctx, pool)
	pool.Close()
}

// URL creates a fresh migrated database and returns its connection string.
func URL(t testing.TB) string {
	t.Helper()
	once.Do(start)
	if initErr != nil {
		t.Fatalf("pgtest: %v", initErr)
	}
	name := fmt.Sprintf("t%d", seq.Add(1))
	ctx := context.Background()
	admin, err := db.Open(ctx, server.URL("postgres"))
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	defer admin.Close()
	mu.Lock()
	_, err = admin.Exec(ctx, "CREATE DATABASE "+name+" TEMPLATE "+template)
	mu.Unlock()
	if err != nil {
		t.Fatalf("pgtest: create database: %v", err)
	}
	return server.URL(name)
}

// New returns a pool on a fresh migrated database, closed when the test ends.
func New(t testing.TB) *pgxpool.Pool {
	t.Helper()
	pool, err := db.Open(context.Background(), URL(t))
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// Stop shuts the server down and removes its files; call it from TestMain
// after m.Run.
func Stop() {
	if server != nil {
		server.Stop()
	}
	if baseDir != "" {
		os.RemoveAll(baseDir)
	}
}

// Main runs a package's tests and then stops the server: call it from
// TestMain.
func Main(m *testing.M) {
	code := m.Run()
	Stop()
	os.Exit(code)
}
