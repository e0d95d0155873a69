package drift

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/coder/quartz"
	"github.com/jackc/pgx/v5/pgxpool"

	"modelplane/db"
	"modelplane/service"
)

// Retention removes prediction samples past their endpoint's
// retention_days, and every sample of an endpoint that no longer exists.
// Retention counts whole UTC days: a sample is removed once its day ended
// more than retention_days days before today began.
//
// prediction_samples is partitioned by day for all endpoints together, so
// a partition can only be dropped once every endpoint is done with it:
// a day is dropped whole (ALTER TABLE … DROP PARTITION, instant, no
// rewrite) when it ends before now minus the LONGEST retention of any
// endpoint. An endpoint with a shorter retention has its older rows
// removed by a mutation (ALTER TABLE … DELETE WHERE endpoint = … AND ts <
// …), issued only when such rows exist, so a quiet pass issues none.
// Deleted endpoints are found by comparing the endpoints that have
// samples with the endpoints table, and removed by the same mutation.
// Partitioning by (endpoint, day) instead would make every insert from a
// gateway batch touch one part per endpoint and multiply the partitions by
// the number of endpoints, which ClickHouse handles badly; see
// docs/drift.md.
type Retention struct {
	service.Runner
	pool  *pgxpool.Pool
	ch    driver.Conn
	log   *slog.Logger
	clock quartz.Clock
}

// NewRetention returns a Retention on clock (quartz.NewReal() when nil).
func NewRetention(pool *pgxpool.Pool, ch driver.Conn, log *slog.Logger, clock quartz.Clock) *Retention {
	if clock == nil {
		clock = quartz.NewReal()
	}
	return &Retention{pool: pool, ch: ch, log: log, clock: clock}
}

// RetentionResult says what one pass removed.
type RetentionResult struct {
	// DroppedDays are the partitions dropped, as YYYY-MM-DD.
	DroppedDays []string
	// Trimmed are the endpoints whose expired rows a mutation deletes;
	// Removed the deleted endpoints whose rows it deletes.
	Trimmed, Removed []string
	// Purged are the rows of endpoints that exist now under another id
	// (deleted and created again), as "table endpoint#id".
	Purged []string
}

// RetentionInterval is how often retention is applied.
const RetentionInterval = time.Hour

// Start applies retention every RetentionInterval until Stop.
func (r *Retention) Start(ctx context.Context) error {
	return r.Go(ctx, func(ctx context.Context) {
		service.Tick(ctx, r.clock, RetentionInterval, nil, func(ctx context.Context) {
			if _, err := r.Apply(ctx); err != nil && ctx.Err() == nil {
				r.log.Warn("prediction sample retention", slog.String("error", err.Error()))
			}
		})
	})
}

const day = 24 * time.Hour

// Apply runs one pass. The deletions by mutation finish in the background
// in ClickHouse; Apply does not wait for them.
func (r *Retention) Apply(ctx context.Context) (RetentionResult, error) {
	all, ids := system.Scope()
	var res RetentionResult
	now := r.clock.Now().UTC()
	rows, err := db.New(r.pool).DriftEndpointRetention(ctx, db.DriftEndpointRetentionParams{AllTeams: all, TeamIDs: ids})
	if err != nil {
		return res, fmt.Errorf("retention: endpoints: %w", err)
	}
	// Retention counts whole UTC days: a sample goes once its day ended
	// retention_days days before today began, so it is kept at least
	// retention_days and at most a day longer, and the endpoint with the
	// longest retention never needs a mutation.
	today := now.Truncate(day)
	keep := map[string]time.Time{} // endpoint → oldest time kept
	current := map[string]int64{}  // endpoint → the id it has now
	longest := 0
	for _, e := range rows {
		keep[e.Name] = today.Add(-time.Duration(e.RetentionDays) * day)
		current[e.Name] = e.ID
		longest = max(longest, int(e.RetentionDays))
	}
	ctx, cancel := context.WithTimeout(ctx, queryTimeout)
	defer cancel()

	// Whole days past every endpoint's retention.
	cutoff := today.Add(-time.Duration(longest) * day)
	parts, err := r.ch.Query(ctx, `SELECT DISTINCT partition_id FROM system.parts
		WHERE database = currentDatabase() AND table = 'prediction_samples' AND active ORDER BY 1`)
	if err != nil {
		return res, fmt.Errorf("retention: partitions: %w", err)
	}
	var days []string
	for parts.Next() {
		var d string
		if err := parts.Scan(&d); err != nil {
			parts.Close()
			return res, fmt.Errorf("retention: partitions: %w", err)
		}
		days = append(days, d)
	}
	parts.Close()
	if err := parts.Err(); err != nil {
		return res, fmt.Errorf("retention: partitions: %w", err)
	}
	for _, d := range days {
		// The partition key is toDate(ts): its id is YYYYMMDD.
		start, err := time.Parse("20060102", d)
		if err != nil {
			return res, fmt.Errorf("retention: partition %q: %w", d, err)
		}
		if start.Add(day).After(cutoff) {
			continue
		}
		date := start.Format(time.DateOnly)
		if err := r.ch.Exec(ctx, "ALTER TABLE prediction_samples DROP PARTITION '"+date+"'"); err != nil {
			return res, fmt.Errorf("retention: drop %s: %w", date, err)
		}
		res.DroppedDays = append(res.DroppedDays, date)
	}

	// What is left: per endpoint, the oldest sample.
	q, err := r.ch.Query(ctx, `SELECT endpoint, toUInt32(min(ts)) FROM prediction_samples GROUP BY endpoint ORDER BY endpoint`)
	if err != nil {
		return res, fmt.Errorf("retention: endpoints with samples: %w", err)
	}
	type oldest struct {
		endpoint string
		at       time.Time
	}
	var have []oldest
	for q.Next() {
		var o oldest
		var sec uint32
		if err := q.Scan(&o.endpoint, &sec); err != nil {
			q.Close()
			return res, fmt.Errorf("retention: endpoints with samples: %w", err)
		}
		o.at = time.Unix(int64(sec), 0).UTC()
		have = append(have, o)
	}
	q.Close()
	if err := q.Err(); err != nil {
		return res, fmt.Errorf("retention: endpoints with samples: %w", err)
	}
	for _, o := range have {
		from, ok := keep[o.endpoint]
		switch {
		case !ok:
			if err := r.ch.Exec(ctx, "ALTER TABLE prediction_samples DELETE WHERE endpoint = ?", o.endpoint); err != nil {
				return res, fmt.Errorf("retention: remove samples of deleted endpoint %s: %w", o.endpoint, err)
			}
			res.Removed = append(res.Removed, o.endpoint)
		case o.at.Before(from):
			if err := r.ch.Exec(ctx, "ALTER TABLE prediction_samples DELETE WHERE endpoint = ? AND ts < toDateTime(?)", o.endpoint, from.Unix()); err != nil {
				return res, fmt.Errorf("retention: trim samples of %s: %w", o.endpoint, err)
			}
			res.Trimmed = append(res.Trimmed, o.endpoint)
		}
	}
	// An endpoint deleted and created again under the same name has a new
	// id: rows of any other id are the old endpoint's (perhaps another
	// team's) and go, from samples, request statistics and their
	// pre-aggregates alike (which then still add up to the raw windows).
	// Rows from before ids were recorded (0) stay with the name.
	for _, table := range []string{"prediction_samples", "request_stats", "request_stats_minutely", "request_stats_hourly"} {
		stale, err := r.staleIDs(ctx, table, current)
		if err != nil {
			return res, err
		}
		for _, s := range stale {
			if err := r.ch.Exec(ctx, "ALTER TABLE "+table+" DELETE WHERE endpoint = ? AND endpoint_id = ?", s.endpoint, s.id); err != nil {
				return res, fmt.Errorf("retention: purge %s of an earlier %s: %w", table, s.endpoint, err)
			}
			res.Purged = append(res.Purged, fmt.Sprintf("%s %s#%d", table, s.endpoint, s.id))
		}
	}
	if len(res.DroppedDays)+len(res.Trimmed)+len(res.Removed)+len(res.Purged) > 0 {
		r.log.Info("prediction sample retention", slog.Any("dropped_days", res.DroppedDays),
			slog.Any("trimmed", res.Trimmed), slog.Any("removed", res.Removed), slog.Any("purged", res.Purged))
	}
	return res, nil
}

// staleID is an endpoint name with an id it no longer has.
type staleID struct {
	endpoint string
	id       int64
}

// staleIDs lists the (endpoint, endpoint id) pairs of table whose endpoint
// exists now under another id. Deleted endpoints' samples go by name above;
// their request statistics stay for the record.
func (r *Retention) staleIDs(ctx context.Context, table string, current map[string]int64) ([]staleID, error) {
	q, err := r.ch.Query(ctx, "SELECT DISTINCT endpoint, endpoint_id FROM "+table+" WHERE endpoint_id != 0")
	if err != nil {
		return nil, fmt.Errorf("retention: endpoint ids of %s: %w", table, err)
	}
	defer q.Close()
	var out []staleID
	for q.Next() {
		var s staleID
		if err := q.Scan(&s.endpoint, &s.id); err != nil {
			return nil, fmt.Errorf("retention: endpoint ids of %s: %w", table, err)
		}
		if id, ok := current[s.endpoint]; ok && id != s.id {
			out = append(out, s)
		}
	}
	return out, q.Err()
}
