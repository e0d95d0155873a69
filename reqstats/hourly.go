package reqstats

import (
	"context"
	"fmt"
	"time"

	"modelplane/autoscale"
)

// MaxHourlySpan is the longest history HourlyRates reads: five weeks, more
// than predictive autoscaling uses.
const MaxHourlySpan = 5 * autoscale.Week

// HourlyRates reads endpoint's request rate by hour over the hours from
// from to to (both truncated to the hour, UTC): the requests of every
// version (pinned ones included: they take capacity too) in windows that
// start inside each hour, divided by 3,600. Hours without a request are
// absent. It is the history autoscale.Forecast predicts from, read from
// the hourly pre-aggregate.
func (r *Reader) HourlyRates(ctx context.Context, endpoint string, endpointID int64, from, to time.Time) (autoscale.History, error) {
	from, to = from.UTC().Truncate(time.Hour), to.UTC().Truncate(time.Hour)
	if !from.Before(to) || to.Sub(from) > MaxHourlySpan {
		return nil, fmt.Errorf("%w: hours from %s to %s (at most %s)", ErrWindow, from, to, MaxHourlySpan)
	}
	ctx, cancel := context.WithTimeout(ctx, queryTimeout)
	defer cancel()
	q := `SELECT toUnixTimestamp(hour) AS h, sum(requests) FROM request_stats_hourly
		WHERE endpoint = ? AND endpoint_id = ? AND hour >= ? AND hour < ? GROUP BY h HAVING sum(requests) > 0 ORDER BY h`
	if r.raw {
		q = `SELECT toUnixTimestamp(toStartOfHour(window_start)) AS hour, sum(requests)
		FROM request_stats WHERE endpoint = ? AND endpoint_id = ? AND window_start >= ? AND window_start < ?
		GROUP BY hour HAVING sum(requests) > 0 ORDER BY hour`
	}
	rows, err := r.ch.Query(ctx, q, endpoint, endpointID, from, to)
	if err != nil {
		return nil, fmt.Errorf("read hourly rates: %w", err)
	}
	defer rows.Close()
	var out autoscale.History
	for rows.Next() {
		var (
			hour     uint32
			requests uint64
		)
		if err := rows.Scan(&hour, &requests); err != nil {
			return nil, fmt.Errorf("read hourly rates: %w", err)
		}
		out = append(out, autoscale.HourRate{Hour: time.Unix(int64(hour), 0).UTC(), RPS: float64(requests) / 3600})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read hourly rates: %w", err)
	}
	return out, nil
}
