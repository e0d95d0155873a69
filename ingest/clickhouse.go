package ingest

import (
	"context"
	"fmt"
	"regexp"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

var dbName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// OpenClickHouse connects to the database named in url (clickhouse://user:pass@host:port/db),
// creating the database when it does not exist yet.
func OpenClickHouse(ctx context.Context, url string) (driver.Conn, error) {
	opts, err := clickhouse.ParseDSN(url)
	if err != nil {
		return nil, fmt.Errorf("clickhouse url: %w", err)
	}
	name := opts.Auth.Database
	if name == "" {
		name = "default"
	}
	if !dbName.MatchString(name) {
		return nil, fmt.Errorf("clickhouse url: bad database name %q", name)
	}
	opts.Auth.Database = "default"
	boot, err := clickhouse.Open(opts)
	if err != nil {
		return nil, fmt.Errorf("connect clickhouse: %w", err)
	}
	err = boot.Exec(ctx, "CREATE DATABASE IF NOT EXISTS "+name)
	boot.Close()
	if err != nil {
		return nil, fmt.Errorf("connect clickhouse: %w", err)
	}
	opts.Auth.Database = name
	conn, err := clickhouse.Open(opts)
	if err != nil {
		return nil, fmt.Errorf("connect clickhouse: %w", err)
	}
	if err := conn.Ping(ctx); err != nil {
		conn.Close()
		return nil, fmt.Errorf("connect clickhouse: %w", err)
	}
	return conn, nil
}
