// Package chtest gives each test a fresh, migrated ClickHouse database on one
// private server per test process (internal/chproc).
package chtest

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"modelplane/ingest"
	"modelplane/internal/chproc"
	"modelplane/migrations"
)

var (
	once    sync.Once
	server  *chproc.Server
	baseDir string
	initErr error
	seq     atomic.Int64
)

func start() {
	baseDir, initErr = os.MkdirTemp("", "chtest-")
	if initErr != nil {
		return
	}
	server, initErr = chproc.Start(context.Background(), baseDir)
}

// URL creates a fresh migrated database and returns its clickhouse:// URL.
func URL(t testing.TB) string {
	t.Helper()
	once.Do(start)
	if initErr != nil {
		t.Fatalf("chtest: %v", initErr)
	}
	url := server.URL(fmt.Sprintf("t%d", seq.Add(1)))
	conn, err := ingest.OpenClickHouse(context.Background(), url)
	if err != nil {
		t.Fatalf("chtest: %v", err)
	}
	defer conn.Close()
	if err := migrations.ClickHouse(context.Background(), conn); err != nil {
		t.Fatalf("chtest: %v", err)
	}
	return url
}

// Empty returns a connection to a fresh database with no migration applied,
// for tests of the migrations themselves.
func Empty(t testing.TB) driver.Conn {
	t.Helper()
	once.Do(start)
	if initErr != nil {
		t.Fatalf("chtest: %v", initErr)
	}
	conn, err := ingest.OpenClickHouse(context.Background(), server.URL(fmt.Sprintf("e%d", seq.Add(1))))
	if err != nil {
		t.Fatalf("chtest: %v", err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// New returns a connection to a fresh migrated database.
func New(t testing.TB) driver.Conn {
	t.Helper()
	conn, err := ingest.OpenClickHouse(context.Background(), URL(t))
	if err != nil {
		t.Fatalf("chtest: %v", err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// Stop shuts the server down and removes its files; call it from TestMain.
func Stop() {
	if server != nil {
		server.Stop()
	}
	if baseDir != "" {
		os.RemoveAll(baseDir)
	}
}
