package chtest

import (
	"context"
	"os"
	"testing"
)

func TestMain(m *testing.M) {
	code := m.Run()
	Stop()
	os.Exit(code)
}

func TestFreshDatabaseIsMigrated(t *testing.T) {
	conn := New(t)
	var n uint64
	if err := conn.QueryRow(context.Background(), "SELECT count() FROM schema_migrations").Scan(&n); err != nil {
		t.Fatalf("schema_migrations: %v", err)
	}
}
