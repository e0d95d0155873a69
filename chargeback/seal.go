package chargeback

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/coder/quartz"

	"modelplane/service"
)

// Sealing: a month's report summing 2,000 GPUs' hourly rollup reads about
// 1.5 million rows; the same month from one row per day and group reads a
// few thousand. Sealer rebuilds each day of the hourly rollup into
// gpu_usage_daily once nothing can arrive for it any more, and records the
// day's totals in gpu_usage_sealed_days. Reports use a sealed day only
// when the daily rows of the very read they use add up to its seal
// (Service.readDaily), so a day half rebuilt, or one resealed after late
// usage, is read from the hourly rollup meanwhile: sealing changes how fast
// a report is, never what it says.

// SealAfter is how old a day must be before it is sealed: past the usage
// stream's 7-day retention (busapi.Streams), so no redelivery can add
// a second to it.
const SealAfter = 8 * 24 * time.Hour

// SealWindow is how far back each pass seals and re-verifies days; older
// days stay as they are (sealed, or read from the hourly rollup).
const SealWindow = 62 * 24 * time.Hour

// Sealer seals days of the hourly rollup; run one per control plane.
type Sealer struct {
	service.Runner
	ch    driver.Conn
	clock quartz.Clock
	log   *slog.Logger
}

// NewSealer returns a Sealer on clock (quartz.NewReal() when nil).
func NewSealer(ch driver.Conn, log *slog.Logger, clock quartz.Clock) *Sealer {
	if clock == nil {
		clock = quartz.NewReal()
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Sealer{ch: ch, clock: clock, log: log}
}

type daySums struct{ seconds, x3600 uint64 }

// sumsByDay reads per-day totals of a table over [from, to).
func sumsByDay(ctx context.Context, ch driver.Conn, q string, from, to time.Time) (map[time.Time]daySums, error) {
	rows, err := ch.Query(ctx, q, from.UTC(), to.UTC())
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[time.Time]daySums{}
	for rows.Next() {
		var d time.Time
		var s daySums
		if err := rows.Scan(&d, &s.seconds, &s.x3600); err != nil {
			return nil, err
		}
		out[time.Date(d.Year(), d.Month(), d.Day(), 0, 0, 0, 0, time.UTC)] = s
	}
	return out, rows.Err()
}

const (
	hourlyByDay = "SELECT toDate(hour) AS d, sum(gpu_seconds), sum(cost_uusd_x3600) FROM gpu_usage_hourly WHERE hour >= ? AND hour < ? GROUP BY d"
	dailyByDay  = "SELECT day, sum(gpu_seconds), sum(cost_uusd_x3600) FROM gpu_usage_daily WHERE day >= toDate(?) AND day < toDate(?) GROUP BY day"
	// The latest seal of each day.
	sealsByDay = "SELECT day, argMax(gpu_seconds, sealed_at), argMax(cost_uusd_x3600, sealed_at) FROM gpu_usage_sealed_days " +
		"WHERE day >= toDate(?) AND day < toDate(?) GROUP BY day"
)

// Seal seals every day of the last SealWindow that is older than SealAfter
// and not sealed, and reseals a sealed one whose hourly totals changed. It
// returns the days it (re)sealed.
func (s *Sealer) Seal(ctx context.Context) (int, error) {
	last := s.clock.Now().UTC().Truncate(24 * time.Hour).Add(-SealAfter)
	first := last.Add(-SealWindow)
	hourly, err := sumsByDay(ctx, s.ch, hourlyByDay, first, last)
	if err != nil {
		return 0, fmt.Errorf("seal: %w", err)
	}
	seals, err := sumsByDay(ctx, s.ch, sealsByDay, first, last)
	if err != nil {
		return 0, fmt.Errorf("seal: %w", err)
	}
	n := 0
	var errs []error
	for d, h := range hourly {
		if seal, ok := seals[d]; ok && seal == h {
			continue
		}
		if err := s.sealDay(ctx, d, h); err != nil {
			errs = append(errs, err)
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}

// sealDay rebuilds one day: drop its partition, sum the hourly rollup into
// it, and seal it only if the rows written add up to the totals read first
// (usage arriving in between leaves the day unsealed until the next pass).
func (s *Sealer) sealDay(ctx context.Context, d time.Time, want daySums) error {
	day := d.Format(time.DateOnly)
	if err := s.ch.Exec(ctx, "ALTER TABLE gpu_usage_daily DROP PARTITION '"+day+"'"); err != nil {
		return fmt.Errorf("seal %s: drop: %w", day, err)
	}
	if err := s.ch.Exec(ctx, `INSERT INTO gpu_usage_daily (day, team, endpoint, model, version, gpu_type, profile,
		gpu_seconds, cost_uusd_x3600, requests, util_pct_sum, memory_mb_sum)
		SELECT toDate(hour) AS day, team, endpoint, model, version, gpu_type, profile,
			sum(gpu_seconds), sum(cost_uusd_x3600), sum(requests), sum(util_pct_sum), sum(memory_mb_sum)
		FROM gpu_usage_hourly WHERE hour >= ? AND hour < ?
		GROUP BY day, team, endpoint, model, version, gpu_type, profile`, d, d.Add(24*time.Hour)); err != nil {
		return fmt.Errorf("seal %s: rebuild: %w", day, err)
	}
	got, err := sumsByDay(ctx, s.ch, dailyByDay, d, d.Add(24*time.Hour))
	if err != nil {
		return fmt.Errorf("seal %s: %w", day, err)
	}
	if got[d] != want {
		return fmt.Errorf("seal %s: the hourly rollup changed while it was summed; next pass", day)
	}
	b, err := s.ch.PrepareBatch(ctx, "INSERT INTO gpu_usage_sealed_days (day, gpu_seconds, cost_uusd_x3600, sealed_at)")
	if err != nil {
		return fmt.Errorf("seal %s: %w", day, err)
	}
	if err := b.Append(d, want.seconds, want.x3600, s.clock.Now().UTC()); err != nil {
		return fmt.Errorf("seal %s: %w", day, err)
	}
	if err := b.Send(); err != nil {
		return fmt.Errorf("seal %s: %w", day, err)
	}
	return nil
}

// SealInterval is how often the sealer looks for days to seal.
const SealInterval = 10 * time.Minute

// Start seals every SealInterval until Stop.
func (s *Sealer) Start(ctx context.Context) error {
	return s.Go(ctx, func(ctx context.Context) {
		service.Tick(ctx, s.clock, SealInterval, nil, func(ctx context.Context) {
			if n, err := s.Seal(ctx); err != nil && ctx.Err() == nil {
				s.log.Warn("seal usage days", slog.String("error", err.Error()))
			} else if n > 0 {
				s.log.Info("sealed usage days", slog.Int("days", n))
			}
		})
	})
}
