package chargeback

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// filter is the WHERE clause every usage read shares: the caller's teams
// and the drill-down filters.
type filter struct {
	all      bool
	teams    []string
	team     string
	endpoint string
}

// where returns the conditions after the time bounds, with their arguments.
func (f filter) where() (string, []any) {
	var b strings.Builder
	var args []any
	if !f.all {
		b.WriteString(" AND has(?, team)")
		args = append(args, f.teams)
	}
	if f.team != "" {
		b.WriteString(" AND team = ?")
		args = append(args, f.team)
	}
	if f.endpoint != "" {
		b.WriteString(" AND endpoint = ?")
		args = append(args, f.endpoint)
	}
	return b.String(), args
}

// usage sums usage over [from, to) at the grain of the given dimensions:
// whole hours from the rollup, the partial hours at the ends from the raw
// table (or everything from the raw table with SourceRaw).
func (s *Service) usage(ctx context.Context, grain []Dimension, f filter, from, to time.Time, src Source) ([]Row, error) {
	type span struct {
		from, to time.Time
		rollup   bool
	}
	var spans []span
	h0 := from.Truncate(time.Hour)
	if h0.Before(from) {
		h0 = h0.Add(time.Hour)
	}
	h1 := to.Truncate(time.Hour)
	if src == SourceRaw || !h0.Before(h1) {
		spans = []span{{from, to, false}}
	} else {
		spans = []span{{from, h0, false}, {h0, h1, true}, {h1, to, false}}
	}
	merged := map[Key]*Row{}
	var order []Key
	for _, sp := range spans {
		if !sp.from.Before(sp.to) {
			continue
		}
		rows, err := s.read(ctx, grain, f, sp.from, sp.to, sp.rollup)
		if err != nil {
			return nil, err
		}
		for _, r := range rows {
			m := merged[r.Key]
			if m == nil {
				m = &Row{Key: r.Key}
				merged[r.Key] = m
				order = append(order, r.Key)
			}
			m.add(r)
		}
	}
	out := make([]Row, 0, len(order))
	for _, k := range order {
		out = append(out, *merged[k])
	}
	return out, nil
}

// read runs one grouped sum over the raw table or the rollup.
func (s *Service) read(ctx context.Context, grain []Dimension, f filter, from, to time.Time, rollup bool) ([]Row, error) {
	cols := make([]string, len(grain))
	for i, d := range grain {
		cols[i] = d.column(rollup)
	}
	sums := "count(), sum(rate_uusd_per_hour), sum(requests), sum(util_pct), sum(memory_mb)"
	table, tcol := "gpu_usage", "ts"
	if rollup {
		sums = "sum(gpu_seconds), sum(cost_uusd_x3600), sum(requests), sum(util_pct_sum), sum(memory_mb_sum)"
		table, tcol = "gpu_usage_hourly", "hour"
	}
	sel := sums
	if len(cols) > 0 {
		sel = strings.Join(cols, ", ") + ", " + sums
	}
	cond, args := f.where()
	q := fmt.Sprintf("SELECT %s FROM %s WHERE %s >= ? AND %s < ?%s", sel, table, tcol, tcol, cond)
	if len(cols) > 0 {
		q += " GROUP BY " + strings.Join(cols, ", ")
	}
	rows, err := s.ch.Query(ctx, q, append([]any{from.UTC(), to.UTC()}, args...)...)
	if err != nil {
		return nil, fmt.Errorf("chargeback usage: %w", err)
	}
	defer rows.Close()
	var out []Row
	for rows.Next() {
		keys := make([]string, len(grain))
		var seconds, cost, requests, memory uint64
		var util float64
		dest := make([]any, 0, len(grain)+5)
		for i := range keys {
			dest = append(dest, &keys[i])
		}
		dest = append(dest, &seconds, &cost, &requests, &util, &memory)
		if err := rows.Scan(dest...); err != nil {
			return nil, fmt.Errorf("chargeback usage: %w", err)
		}
		if seconds == 0 {
			continue
		}
		r := Row{GPUSeconds: int64(seconds), CostX3600: int64(cost), Requests: int64(requests), UtilPctSum: util, MemoryMBSum: int64(memory)}
		for i, d := range grain {
			r.set(d, keys[i])
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("chargeback usage: %w", err)
	}
	return out, nil
}

// tokens sums the tokens the gateways counted per endpoint and version in
// [from, to), by the start of their statistics windows.
func (s *Service) tokens(ctx context.Context, f filter, from, to time.Time) (map[[2]string]int64, error) {
	cond, args := f.where()
	rows, err := s.ch.Query(ctx, "SELECT endpoint, version, sum(tokens) FROM request_stats WHERE window_start >= ? AND window_start < ?"+cond+
		" GROUP BY endpoint, version", append([]any{from.UTC(), to.UTC()}, args...)...)
	if err != nil {
		return nil, fmt.Errorf("chargeback tokens: %w", err)
	}
	defer rows.Close()
	out := map[[2]string]int64{}
	for rows.Next() {
		var endpoint, version string
		var n uint64
		if err := rows.Scan(&endpoint, &version, &n); err != nil {
			return nil, fmt.Errorf("chargeback tokens: %w", err)
		}
		out[[2]string{endpoint, version}] = int64(n)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("chargeback tokens: %w", err)
	}
	return out, nil
}

// freshness fills rep.Newest and rep.Delayed. Only a period that reaches
// into the last LagWindow is checked, and only that window is read: the
// raw table is ordered by node then time, so the read is a range per node.
func (s *Service) freshness(ctx context.Context, rep *Report) error {
	now := s.now().UTC()
	since := now.Add(-LagWindow)
	if !rep.To.After(since) {
		return nil
	}
	var t time.Time
	if err := s.ch.QueryRow(ctx, "SELECT max(ts) FROM gpu_usage WHERE ts >= ?", since).Scan(&t); err != nil {
		return fmt.Errorf("chargeback newest usage: %w", err)
	}
	if t.Unix() > 0 && !t.Before(since) {
		rep.Newest = t.UTC()
	}
	edge := rep.Newest.Add(s.LagAllowance)
	if rep.Newest.IsZero() {
		edge = since
	}
	rep.Delayed = rep.To.After(edge) && now.After(edge)
	return nil
}
