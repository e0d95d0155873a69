package chargeback

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
)

// filter is the WHERE clause every usage read shares: the caller's teams
// and the drill-down filters.
type filter struct {
	all   bool
	teams []string
	// called are endpoints of other teams that teams called (a report
	// split by caller team): their rows match too.
	called   []string
	team     string
	endpoint string
}

// where returns the conditions after the time bounds, with their arguments.
func (f filter) where() (string, []any) {
	var b strings.Builder
	var args []any
	switch {
	case f.all:
	case len(f.called) > 0:
		b.WriteString(" AND (has(?, team) OR has(?, endpoint))")
		args = append(args, f.teams, f.called)
	default:
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

// cpuSeconds and cpuSecondsRaw sum the CPU core-seconds of a group, and
// their utilisation (kept apart from the GPUs'), from
// the rollups and from the raw table: usage of CPU replicas is one row per
// core and second, typed gpu_type cpu (proto.CPUType).
const (
	cpuSeconds    = "sumIf(gpu_seconds, gpu_type = 'cpu'), sumIf(util_pct_sum, gpu_type = 'cpu')"
	cpuSecondsRaw = "countIf(gpu_type = 'cpu'), sumIf(util_pct, gpu_type = 'cpu')"
)

// table is where a read sums usage from.
type table int

const (
	tableRaw    table = iota // gpu_usage, per second
	tableHourly              // gpu_usage_hourly
	tableDaily               // gpu_usage_daily, sealed days only
)

// span is a stretch of a period and the table it is read from.
type span struct {
	from, to time.Time
	table    table
}

// usage sums usage over [from, to) at the grain of the given dimensions:
// sealed whole days from the daily table, other whole hours from the hourly
// rollup, the partial hours at the ends by partialHour (or everything from
// the raw table with SourceRaw).
func (s *Service) usage(ctx context.Context, grain []Dimension, f filter, from, to time.Time, src Source) ([]Row, error) {
	h0 := from.Truncate(time.Hour)
	if h0.Before(from) {
		h0 = h0.Add(time.Hour)
	}
	h1 := to.Truncate(time.Hour)
	var spans []span
	var seals map[time.Time]daySums
	if src == SourceRaw || h1.Before(h0) {
		spans = []span{{from, to, tableRaw}}
	} else if h0.Equal(h1) {
		// Two partial hours and no whole one between (a canary started
		// in the last hour): each is read as a partial hour.
		spans = []span{{from, h0, tableRaw}, {h0, to, tableRaw}}
	} else if slices.Contains(grain, dimHour) {
		// Sealed days have no hours: a split by hour reads the rollup.
		spans = []span{{from, h0, tableRaw}, {h0, h1, tableHourly}, {h1, to, tableRaw}}
	} else {
		spans = append(spans, span{from, h0, tableRaw})
		mid, sealed, err := s.wholeHours(ctx, h0, h1)
		if err != nil {
			return nil, err
		}
		seals = sealed
		spans = append(spans, mid...)
		spans = append(spans, span{h1, to, tableRaw})
	}
	if s.beforeRead != nil {
		s.beforeRead()
	}
	merged := map[Key]*Row{}
	var order []Key
	for i := 0; i < len(spans); i++ {
		sp := spans[i]
		if !sp.from.Before(sp.to) {
			continue
		}
		var rows []Row
		var err error
		if sp.table == tableDaily {
			var ok bool
			if rows, ok, err = s.readSealed(ctx, grain, f, sp.from, sp.to, seals); err != nil || ok {
				goto merge
			}
			var unverified []time.Time
			rows, unverified, err = s.readDaily(ctx, grain, f, sp.from, sp.to, seals)
			// A day whose rows in this very read do not add up to its
			// seal (being resealed, or sealed by a run that died) is read
			// from the hourly rollup instead.
			for _, d := range unverified {
				spans = append(spans, span{d, d.Add(24 * time.Hour), tableHourly})
			}
		} else if sp.table == tableRaw && src != SourceRaw {
			rows, err = s.partialHour(ctx, grain, f, sp.from, sp.to)
		} else {
			rows, err = s.read(ctx, grain, f, sp.from, sp.to, sp.table)
		}
	merge:
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

// wholeHours splits [h0, h1) into spans of sealed days (daily table) and
// everything else (hourly rollup), and returns the sealed days' latest
// seals. Whether a sealed day's daily rows add up to its seal is checked by
// readDaily on the very rows it reads, not here: a reseal drops and
// rebuilds a day between any two queries.
func (s *Service) wholeHours(ctx context.Context, h0, h1 time.Time) ([]span, map[time.Time]daySums, error) {
	d0 := h0.Truncate(24 * time.Hour)
	if d0.Before(h0) {
		d0 = d0.Add(24 * time.Hour)
	}
	d1 := h1.Truncate(24 * time.Hour)
	if !d0.Before(d1) {
		return []span{{h0, h1, tableHourly}}, nil, nil
	}
	seals, err := sumsByDay(ctx, s.ch, sealsByDay, d0, d1)
	if err != nil {
		return nil, nil, fmt.Errorf("chargeback sealed days: %w", err)
	}
	spans := []span{{h0, d0, tableHourly}}
	for d := d0; d.Before(d1); d = d.Add(24 * time.Hour) {
		t := tableHourly
		if _, ok := seals[d]; ok {
			t = tableDaily
		}
		if n := len(spans); spans[n-1].table == t && spans[n-1].to.Equal(d) {
			spans[n-1].to = d.Add(24 * time.Hour)
			continue
		}
		spans = append(spans, span{d, d.Add(24 * time.Hour), t})
	}
	return append(spans, span{d1, h1, tableHourly}), seals, nil
}

// readSealed is the usual read of sealed days [from, to): the report's
// groups (the filter as a grouping column) with, per group, its GPU-seconds
// and cost numerator per day (sumMap), which add up to each day's whole
// total in the same SELECT. ok is false when a day does not add up to its
// seal; the caller then reads the span with readDaily, which splits the
// rows by day and reads only the failing days from the hourly rollup.
// Grouping by day only then keeps the usual read as small as before.
func (s *Service) readSealed(ctx context.Context, grain []Dimension, f filter, from, to time.Time,
	seals map[time.Time]daySums) (rows []Row, ok bool, err error) {
	cols := make([]string, len(grain))
	for i, d := range grain {
		cols[i] = d.column(tableDaily)
	}
	match, args := f.where()
	group := append([]string{"m"}, cols...)
	q := fmt.Sprintf("SELECT toUInt8(1%s) AS m%s, sum(gpu_seconds), sum(cost_uusd_x3600), sum(requests), sum(util_pct_sum), sum(memory_mb_sum), "+cpuSeconds+", "+
		"tupleElement(sumMap([day], [gpu_seconds]), 1), tupleElement(sumMap([day], [gpu_seconds]), 2), tupleElement(sumMap([day], [cost_uusd_x3600]), 2) "+
		"FROM gpu_usage_daily WHERE day >= toDate(?) AND day < toDate(?) GROUP BY %s",
		match, strings.Join(append([]string{""}, cols...), ", "), strings.Join(group, ", "))
	res, err := s.ch.Query(ctx, q, append(args, from.UTC(), to.UTC())...)
	if err != nil {
		return nil, false, fmt.Errorf("chargeback usage: %w", err)
	}
	defer res.Close()
	totals := map[time.Time]daySums{}
	var out []Row
	for res.Next() {
		var m uint8
		keys := make([]string, len(grain))
		var seconds, cost, requests, memory, cpu uint64
		var util, cpuUtil float64
		var days []time.Time
		var daySeconds, dayCost []uint64
		dest := make([]any, 0, len(grain)+11)
		dest = append(dest, &m)
		for i := range keys {
			dest = append(dest, &keys[i])
		}
		dest = append(dest, &seconds, &cost, &requests, &util, &memory, &cpu, &cpuUtil, &days, &daySeconds, &dayCost)
		if err := res.Scan(dest...); err != nil {
			return nil, false, fmt.Errorf("chargeback usage: %w", err)
		}
		if len(daySeconds) != len(days) || len(dayCost) != len(days) {
			return nil, false, fmt.Errorf("chargeback usage: per-day sums of %d days, %d seconds, %d costs", len(days), len(daySeconds), len(dayCost))
		}
		for i, d := range days {
			d = time.Date(d.Year(), d.Month(), d.Day(), 0, 0, 0, 0, time.UTC)
			t := totals[d]
			t.seconds += daySeconds[i]
			t.x3600 += dayCost[i]
			totals[d] = t
		}
		if m == 0 || seconds == 0 {
			continue
		}
		r := Row{GPUSeconds: int64(seconds), CostX3600: int64(cost), Requests: int64(requests), UtilPctSum: util, MemoryMBSum: int64(memory),
			CPUCoreSeconds: int64(cpu), CPUUtilPctSum: cpuUtil}
		for i, d := range grain {
			r.set(d, keys[i])
		}
		out = append(out, r)
	}
	if err := res.Err(); err != nil {
		return nil, false, fmt.Errorf("chargeback usage: %w", err)
	}
	for d := from; d.Before(to); d = d.Add(24 * time.Hour) {
		if seal, sealed := seals[d]; !sealed || totals[d] != seal {
			return nil, false, nil
		}
	}
	return out, true, nil
}

// readDaily reads sealed days [from, to) from the daily table, grouped by
// day as well, with the filter as a grouping column rather than a
// condition: the same read gives each day's unfiltered totals, which are
// compared with the day's seal. Rows of days that add up to their seal are
// returned; the other days are returned as unverified, for the caller to
// read from the hourly rollup. One SELECT reads one set of parts, so a day
// dropped or half rebuilt by a reseal cannot pass as sealed.
func (s *Service) readDaily(ctx context.Context, grain []Dimension, f filter, from, to time.Time,
	seals map[time.Time]daySums) ([]Row, []time.Time, error) {
	cols := make([]string, len(grain))
	for i, d := range grain {
		cols[i] = d.column(tableDaily)
	}
	match, args := f.where()
	group := append([]string{"day", "m"}, cols...)
	q := fmt.Sprintf("SELECT day, toUInt8(1%s) AS m%s, sum(gpu_seconds), sum(cost_uusd_x3600), sum(requests), sum(util_pct_sum), sum(memory_mb_sum), "+cpuSeconds+" "+
		"FROM gpu_usage_daily WHERE day >= toDate(?) AND day < toDate(?) GROUP BY %s",
		match, strings.Join(append([]string{""}, cols...), ", "), strings.Join(group, ", "))
	rows, err := s.ch.Query(ctx, q, append(args, from.UTC(), to.UTC())...)
	if err != nil {
		return nil, nil, fmt.Errorf("chargeback usage: %w", err)
	}
	defer rows.Close()
	type dayRow struct {
		day time.Time
		row Row
	}
	var matched []dayRow
	totals := map[time.Time]daySums{}
	for rows.Next() {
		var day time.Time
		var m uint8
		keys := make([]string, len(grain))
		var seconds, cost, requests, memory, cpu uint64
		var util, cpuUtil float64
		dest := make([]any, 0, len(grain)+9)
		dest = append(dest, &day, &m)
		for i := range keys {
			dest = append(dest, &keys[i])
		}
		dest = append(dest, &seconds, &cost, &requests, &util, &memory, &cpu, &cpuUtil)
		if err := rows.Scan(dest...); err != nil {
			return nil, nil, fmt.Errorf("chargeback usage: %w", err)
		}
		day = time.Date(day.Year(), day.Month(), day.Day(), 0, 0, 0, 0, time.UTC)
		t := totals[day]
		t.seconds += seconds
		t.x3600 += cost
		totals[day] = t
		if m == 0 || seconds == 0 {
			continue
		}
		r := Row{GPUSeconds: int64(seconds), CostX3600: int64(cost), Requests: int64(requests), UtilPctSum: util, MemoryMBSum: int64(memory),
			CPUCoreSeconds: int64(cpu), CPUUtilPctSum: cpuUtil}
		for i, d := range grain {
			r.set(d, keys[i])
		}
		matched = append(matched, dayRow{day, r})
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("chargeback usage: %w", err)
	}
	var out []Row
	for _, dr := range matched {
		if totals[dr.day] == seals[dr.day] {
			out = append(out, dr.row)
		}
	}
	var unverified []time.Time
	for d := from; d.Before(to); d = d.Add(24 * time.Hour) {
		// An empty day has no rows and a zero seal.
		if seal, ok := seals[d]; !ok || totals[d] != seal {
			unverified = append(unverified, d)
		}
	}
	return out, unverified, nil
}

// partialHour sums usage over [from, to), a part of one hour. Raw
// seconds are ordered by node and time, not by team or endpoint, so a
// read of them scans every node's seconds of its time range whatever the
// filter. A part whose raw seconds up to now outnumber those of the rest
// of its hour is therefore read as its hour from the hourly rollup less
// the raw seconds of the rest of the hour, in one SELECT (both tables'
// parts chosen at its start): for the partial hour that ends now (a report
// or canary up to now), that rest is the seconds after now, none. Every sum but the utilisation is an integer, so the
// difference equals the raw sum exactly. A group that comes out negative
// (a raw block stored whose view block is not yet) is read again from the
// raw seconds.
func (s *Service) partialHour(ctx context.Context, grain []Dimension, f filter, from, to time.Time) ([]Row, error) {
	hour := from.Truncate(time.Hour)
	end := hour.Add(time.Hour)
	// Seconds after now are not stored yet: what each way scans is its
	// stretch of raw seconds up to now.
	now := s.clock.Now().UTC()
	past := func(a, b time.Time) time.Duration {
		if b.After(now) {
			b = now
		}
		return max(b.Sub(a), 0)
	}
	if to.After(end) || past(from, to) <= past(hour, from)+past(to, end) {
		return s.read(ctx, grain, f, from, to, tableRaw)
	}
	hourly := make([]string, len(grain))
	raw := make([]string, len(grain))
	outer := make([]string, len(grain))
	for i, d := range grain {
		outer[i] = fmt.Sprintf("g%d", i)
		hourly[i] = d.column(tableHourly) + " AS " + outer[i]
		raw[i] = d.column(tableRaw) + " AS " + outer[i]
	}
	lead := func(cols []string) string {
		if len(cols) == 0 {
			return ""
		}
		return strings.Join(cols, ", ") + ", "
	}
	where, args := f.where()
	q := "SELECT " + lead(outer) + "sum(s), sum(c), sum(r), sum(u), sum(m), sum(cs), sum(cu) FROM (" +
		"SELECT " + lead(hourly) + "toInt64(gpu_seconds) AS s, toInt64(cost_uusd_x3600) AS c, toInt64(requests) AS r, toFloat64(util_pct_sum) AS u, " +
		"toInt64(memory_mb_sum) AS m, toInt64(if(gpu_type = 'cpu', gpu_seconds, 0)) AS cs, toFloat64(if(gpu_type = 'cpu', util_pct_sum, 0)) AS cu " +
		"FROM gpu_usage_hourly WHERE hour = ?" + where +
		" UNION ALL " +
		"SELECT " + lead(raw) + "toInt64(-1) AS s, -toInt64(rate_uusd_per_hour) AS c, -toInt64(requests) AS r, -toFloat64(util_pct) AS u, " +
		"-toInt64(memory_mb) AS m, -toInt64(gpu_type = 'cpu') AS cs, -toFloat64(if(gpu_type = 'cpu', util_pct, 0)) AS cu " +
		"FROM gpu_usage WHERE ((ts >= ? AND ts < ?) OR (ts >= ? AND ts < ?))" + where + ")"
	if len(outer) > 0 {
		q += " GROUP BY " + strings.Join(outer, ", ")
	}
	qargs := append([]any{hour.UTC()}, args...)
	qargs = append(qargs, hour.UTC(), from.UTC(), to.UTC(), end.UTC())
	qargs = append(qargs, args...)
	res, err := s.ch.Query(ctx, q, qargs...)
	if err != nil {
		return nil, fmt.Errorf("chargeback usage: %w", err)
	}
	defer res.Close()
	var out []Row
	for res.Next() {
		keys := make([]string, len(grain))
		var seconds, cost, requests, memory, cpu int64
		var util, cpuUtil float64
		dest := make([]any, 0, len(grain)+7)
		for i := range keys {
			dest = append(dest, &keys[i])
		}
		dest = append(dest, &seconds, &cost, &requests, &util, &memory, &cpu, &cpuUtil)
		if err := res.Scan(dest...); err != nil {
			return nil, fmt.Errorf("chargeback usage: %w", err)
		}
		if seconds < 0 || cost < 0 || requests < 0 || memory < 0 || cpu < 0 {
			res.Close()
			return s.read(ctx, grain, f, from, to, tableRaw)
		}
		if seconds == 0 {
			continue
		}
		r := Row{GPUSeconds: seconds, CostX3600: cost, Requests: requests, UtilPctSum: util, MemoryMBSum: memory,
			CPUCoreSeconds: cpu, CPUUtilPctSum: cpuUtil}
		for i, d := range grain {
			r.set(d, keys[i])
		}
		out = append(out, r)
	}
	if err := res.Err(); err != nil {
		return nil, fmt.Errorf("chargeback usage: %w", err)
	}
	return out, nil
}

// read runs one grouped sum over one table.
func (s *Service) read(ctx context.Context, grain []Dimension, f filter, from, to time.Time, t table) ([]Row, error) {
	cols := make([]string, len(grain))
	for i, d := range grain {
		cols[i] = d.column(t)
	}
	var sums, tbl, cond string
	switch t {
	case tableRaw:
		sums, tbl, cond = "count(), sum(rate_uusd_per_hour), sum(requests), sum(util_pct), sum(memory_mb), "+cpuSecondsRaw, "gpu_usage", "ts >= ? AND ts < ?"
	case tableHourly:
		sums, tbl, cond = "sum(gpu_seconds), sum(cost_uusd_x3600), sum(requests), sum(util_pct_sum), sum(memory_mb_sum), "+cpuSeconds, "gpu_usage_hourly", "hour >= ? AND hour < ?"
	case tableDaily:
		sums, tbl, cond = "sum(gpu_seconds), sum(cost_uusd_x3600), sum(requests), sum(util_pct_sum), sum(memory_mb_sum), "+cpuSeconds, "gpu_usage_daily", "day >= toDate(?) AND day < toDate(?)"
	}
	sel := sums
	if len(cols) > 0 {
		sel = strings.Join(cols, ", ") + ", " + sums
	}
	where, args := f.where()
	q := fmt.Sprintf("SELECT %s FROM %s WHERE %s%s", sel, tbl, cond, where)
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
		var seconds, cost, requests, memory, cpu uint64
		var util, cpuUtil float64
		dest := make([]any, 0, len(grain)+7)
		for i := range keys {
			dest = append(dest, &keys[i])
		}
		dest = append(dest, &seconds, &cost, &requests, &util, &memory, &cpu, &cpuUtil)
		if err := rows.Scan(dest...); err != nil {
			return nil, fmt.Errorf("chargeback usage: %w", err)
		}
		if seconds == 0 {
			continue
		}
		r := Row{GPUSeconds: int64(seconds), CostX3600: int64(cost), Requests: int64(requests), UtilPctSum: util, MemoryMBSum: int64(memory),
			CPUCoreSeconds: int64(cpu), CPUUtilPctSum: cpuUtil}
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

// statsSpans splits [from, to) for reads of request statistics: whole
// hours from request_stats_hourly, the partial hours at either end from
// the raw windows (everything raw with SourceRaw). A window counts in the
// hour its start falls in both ways, so the sums are the raw windows'
// exactly.
func statsSpans(from, to time.Time, src Source) []span {
	h0 := from.Truncate(time.Hour)
	if h0.Before(from) {
		h0 = h0.Add(time.Hour)
	}
	h1 := to.Truncate(time.Hour)
	if src == SourceRaw || !h0.Before(h1) {
		return []span{{from, to, tableRaw}}
	}
	var out []span
	for _, sp := range []span{{from, h0, tableRaw}, {h0, h1, tableHourly}, {h1, to, tableRaw}} {
		if sp.from.Before(sp.to) {
			out = append(out, sp)
		}
	}
	return out
}

// calledBy lists the endpoints that teams called as a granted caller team
// (caller_team, graphs' steps included) in [from, to), by the start of
// the statistics windows as statsSpans reads them: whole hours from
// request_stats_hourly, the partial hours at the ends from the raw
// windows.
func (s *Service) calledBy(ctx context.Context, teams []string, from, to time.Time, src Source) ([]string, error) {
	seen := map[string]bool{}
	for _, sp := range statsSpans(from, to, src) {
		tbl, _, at := sp.statsTable()
		rows, err := s.ch.Query(ctx, "SELECT DISTINCT endpoint FROM "+tbl+" WHERE "+at+" >= ? AND "+at+" < ? AND has(?, caller_team)",
			sp.from.UTC(), sp.to.UTC(), teams)
		if err != nil {
			return nil, fmt.Errorf("chargeback called endpoints: %w", err)
		}
		for rows.Next() {
			var e string
			if err := rows.Scan(&e); err != nil {
				rows.Close()
				return nil, fmt.Errorf("chargeback called endpoints: %w", err)
			}
			seen[e] = true
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return nil, fmt.Errorf("chargeback called endpoints: %w", err)
		}
	}
	out := make([]string, 0, len(seen))
	for e := range seen {
		out = append(out, e)
	}
	slices.Sort(out)
	return out, nil
}

// statsTable names the request statistics table of sp, the expression of
// a row's hour and the column its time bounds apply to.
func (sp span) statsTable() (table, hour, at string) {
	if sp.table == tableHourly {
		return "request_stats_hourly", "hour", "hour"
	}
	return "request_stats", "toStartOfHour(window_start)", "window_start"
}

// tokens sums the tokens the gateways counted per owning team, endpoint
// and version in [from, to), by the start of their statistics windows
// (statsSpans). gpu_usage carries no endpoint id, so the team is what
// keeps an endpoint deleted and created again under the same name by
// another team from being credited the old one's tokens (statistics carry
// the owning team).
func (s *Service) tokens(ctx context.Context, f filter, from, to time.Time, src Source) (map[[3]string]int64, error) {
	cond, args := f.where()
	out := map[[3]string]int64{}
	for _, sp := range statsSpans(from, to, src) {
		tbl, _, at := sp.statsTable()
		rows, err := s.ch.Query(ctx, "SELECT team, endpoint, version, sum(tokens) FROM "+tbl+" WHERE "+at+" >= ? AND "+at+" < ?"+cond+
			" GROUP BY team, endpoint, version", append([]any{sp.from.UTC(), sp.to.UTC()}, args...)...)
		if err != nil {
			return nil, fmt.Errorf("chargeback tokens: %w", err)
		}
		for rows.Next() {
			var team, endpoint, version string
			var n uint64
			if err := rows.Scan(&team, &endpoint, &version, &n); err != nil {
				rows.Close()
				return nil, fmt.Errorf("chargeback tokens: %w", err)
			}
			out[[3]string{team, endpoint, version}] += int64(n)
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return nil, fmt.Errorf("chargeback tokens: %w", err)
		}
	}
	return out, nil
}

// freshness fills rep.Newest and rep.Delayed. Only a period that reaches
// into the last LagWindow is checked, and only that window is read: the
// raw table is ordered by node then time, so the read is a range per node.
func (s *Service) freshness(ctx context.Context, rep *Report) error {
	now := s.clock.Now().UTC()
	since := now.Add(-LagWindow)
	if !rep.To.After(since) {
		return nil
	}
	t, err := s.newestUsage(ctx, since)
	if err != nil {
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
