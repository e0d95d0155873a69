// Package migrations holds the PostgreSQL and ClickHouse schema as numbered SQL
// files and applies the ones a database has not seen yet. The PostgreSQL files
// are also sqlc's schema. It owns no data and knows nothing of the domain.
package migrations

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

//go:embed postgres/*.sql clickhouse/*
var files embed.FS

type migration struct {
	version int
	name    string
	sql     string
}

func load(dir string) ([]migration, error) {
	entries, err := fs.ReadDir(files, dir)
	if err != nil {
		return nil, err
	}
	var ms []migration
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".sql") {
			continue
		}
		num, _, _ := strings.Cut(e.Name(), "_")
		v, err := strconv.Atoi(num)
		if err != nil {
			return nil, fmt.Errorf("migration %s: name must start with a number", e.Name())
		}
		b, err := files.ReadFile(path.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		ms = append(ms, migration{version: v, name: e.Name(), sql: string(b)})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].version < ms[j].version })
	return ms, nil
}

// advisoryLockID serialises concurrent migrators (several replicas starting).
const advisoryLockID = 7_316_020_001

// Postgres applies pending PostgreSQL migrations, each in its own transaction.
func Postgres(ctx context.Context, pool *pgxpool.Pool) error {
	ms, err := load("postgres")
	if err != nil {
		return err
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("migrate postgres: %w", err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", advisoryLockID); err != nil {
		return fmt.Errorf("migrate postgres: lock: %w", err)
	}
	defer conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", advisoryLockID)
	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return fmt.Errorf("migrate postgres: %w", err)
	}
	for _, m := range ms {
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			var done bool
			if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM schema_migrations WHERE version = $1)", m.version).Scan(&done); err != nil || done {
				return err
			}
			if _, err := tx.Exec(ctx, m.sql); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "INSERT INTO schema_migrations (version, name) VALUES ($1, $2)", m.version, m.name)
			return err
		})
		if err != nil {
			return fmt.Errorf("migrate postgres %s: %w", m.name, err)
		}
	}
	return nil
}

// clickHouseLockID serialises ClickHouse migrators: a migration that
// backfills a rollup (0013) must run once, and ClickHouse has no lock.
const clickHouseLockID = 7_316_020_002

// ClickHouseLocked is ClickHouse under a PostgreSQL advisory lock, so that
// control planes starting together apply each ClickHouse migration once.
func ClickHouseLocked(ctx context.Context, pool *pgxpool.Pool, conn driver.Conn) error {
	c, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("migrate clickhouse: %w", err)
	}
	defer c.Release()
	if _, err := c.Exec(ctx, "SELECT pg_advisory_lock($1)", clickHouseLockID); err != nil {
		return fmt.Errorf("migrate clickhouse: lock: %w", err)
	}
	defer c.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", clickHouseLockID)
	return ClickHouse(ctx, conn)
}

// ClickHouse applies pending ClickHouse migrations. Each file holds statements
// separated by ";" on a line of its own end; ClickHouse has no transactions, so
// every statement must be idempotent (IF NOT EXISTS), except a backfill, which
// relies on the migration being recorded once it ran (ClickHouseLocked).
func ClickHouse(ctx context.Context, conn driver.Conn) error {
	return clickHouseUpTo(ctx, conn, 0)
}

// clickHouseUpTo applies the pending ClickHouse migrations numbered up to
// last (every one when last is 0).
func clickHouseUpTo(ctx context.Context, conn driver.Conn, last int) error {
	ms, err := load("clickhouse")
	if err != nil {
		return err
	}
	if err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version UInt32, name String, applied_at DateTime DEFAULT now()) ENGINE = MergeTree() ORDER BY version`); err != nil {
		return fmt.Errorf("migrate clickhouse: %w", err)
	}
	for _, m := range ms {
		if last > 0 && m.version > last {
			break
		}
		var n uint64
		if err := conn.QueryRow(ctx, "SELECT count() FROM schema_migrations WHERE version = ?", uint32(m.version)).Scan(&n); err != nil {
			return fmt.Errorf("migrate clickhouse %s: %w", m.name, err)
		}
		if n > 0 {
			continue
		}
		for _, stmt := range strings.Split(m.sql, ";\n") {
			if strings.TrimSpace(stripComments(stmt)) == "" {
				continue
			}
			if err := conn.Exec(ctx, stmt); err != nil {
				return fmt.Errorf("migrate clickhouse %s: %w", m.name, err)
			}
		}
		// An INSERT with inline VALUES never answers on ClickHouse 18.16 over
		// the native protocol; a batch with a column list does.
		b, err := conn.PrepareBatch(ctx, "INSERT INTO schema_migrations (version, name)")
		if err == nil {
			if err = b.Append(uint32(m.version), m.name); err == nil {
				err = b.Send()
			}
		}
		if err != nil {
			return fmt.Errorf("migrate clickhouse %s: %w", m.name, err)
		}
	}
	return nil
}

func stripComments(s string) string {
	var b strings.Builder
	for _, line := range strings.Split(s, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "--") {
			b.WriteString(line)
		}
	}
	return b.String()
}
