package chargeback

import (
	"context"
	"fmt"
	"math/bits"
	"slices"
	"time"
)

// callerUse is what one caller team sent one endpoint in one hour, as the
// gateways counted it.
type callerUse struct {
	requests, tokens int64
}

// useKey names an endpoint of a team in an hour.
type useKey struct {
	team, endpoint, hour string
}

// callers reads request_stats' requests and tokens per owning team,
// endpoint, hour and caller team ("" is the owners' own) in [from, to).
func (s *Service) callers(ctx context.Context, f filter, from, to time.Time) (map[useKey]map[string]callerUse, error) {
	cond, args := f.where()
	rows, err := s.ch.Query(ctx, "SELECT team, endpoint, toString(toStartOfHour(window_start)) AS h, caller_team, sum(requests), sum(tokens) "+
		"FROM request_stats WHERE window_start >= ? AND window_start < ?"+cond+" GROUP BY team, endpoint, h, caller_team",
		append([]any{from.UTC(), to.UTC()}, args...)...)
	if err != nil {
		return nil, fmt.Errorf("chargeback callers: %w", err)
	}
	defer rows.Close()
	out := map[useKey]map[string]callerUse{}
	for rows.Next() {
		var k useKey
		var caller string
		var n, tok uint64
		if err := rows.Scan(&k.team, &k.endpoint, &k.hour, &caller, &n, &tok); err != nil {
			return nil, fmt.Errorf("chargeback callers: %w", err)
		}
		if caller == k.team {
			caller = ""
		}
		m := out[k]
		if m == nil {
			m = map[string]callerUse{}
			out[k] = m
		}
		u := m[caller]
		u.requests += int64(n)
		u.tokens += int64(tok)
		m[caller] = u
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("chargeback callers: %w", err)
	}
	return out, nil
}

// apportion splits each usage row (at a grain with team, endpoint and
// hour) among the teams that called its endpoint in its hour and sets
// each part's CallerTeam.
func (s *Service) apportion(ctx context.Context, rows []Row, f filter, from, to time.Time) ([]Row, error) {
	if len(rows) == 0 {
		return rows, nil
	}
	uses, err := s.callers(ctx, f, from, to)
	if err != nil {
		return nil, err
	}
	out := make([]Row, 0, len(rows))
	for _, r := range rows {
		out = append(out, split(r, uses[useKey{r.Team, r.Endpoint, r.hour}])...)
	}
	return out, nil
}

// split divides one endpoint-hour's usage row among its callers: each
// granted team gets the row's cost numerator, GPU and CPU seconds,
// requests and memory times its share of the hour's requests (of its
// tokens when any were counted), rounded down in exact integers, and
// utilisation by the same share; the owning team (r.Team) keeps the rest,
// so the parts add up exactly to r. uses are by caller team, "" the
// owners' own calls. Rows without calls stay whole with the owners.
func split(r Row, uses map[string]callerUse) []Row {
	rest := r
	rest.CallerTeam = r.Team
	if r.Team == "" || len(uses) == 0 {
		return []Row{rest}
	}
	byTokens := false
	for _, u := range uses {
		byTokens = byTokens || u.tokens > 0
	}
	weight := func(u callerUse) int64 {
		if byTokens {
			return u.tokens
		}
		return u.requests
	}
	var total int64
	names := make([]string, 0, len(uses))
	for c, u := range uses {
		total += weight(u)
		if c != "" && c != r.Team {
			names = append(names, c)
		}
	}
	if total <= 0 || len(names) == 0 {
		return []Row{rest}
	}
	slices.Sort(names)
	out := make([]Row, 0, len(names)+1)
	for _, c := range names {
		w := weight(uses[c])
		if w <= 0 {
			continue
		}
		p := Row{Key: r.Key}
		p.CallerTeam = c
		p.CostX3600 = mulDivFloor(r.CostX3600, w, total)
		p.GPUSeconds = mulDivFloor(r.GPUSeconds, w, total)
		p.CPUCoreSeconds = mulDivFloor(r.CPUCoreSeconds, w, total)
		p.Requests = mulDivFloor(r.Requests, w, total)
		p.MemoryMBSum = mulDivFloor(r.MemoryMBSum, w, total)
		share := float64(w) / float64(total)
		p.UtilPctSum = r.UtilPctSum * share
		p.CPUUtilPctSum = r.CPUUtilPctSum * share
		rest.CostX3600 -= p.CostX3600
		rest.GPUSeconds -= p.GPUSeconds
		rest.CPUCoreSeconds -= p.CPUCoreSeconds
		rest.Requests -= p.Requests
		rest.MemoryMBSum -= p.MemoryMBSum
		rest.UtilPctSum -= p.UtilPctSum
		rest.CPUUtilPctSum -= p.CPUUtilPctSum
		out = append(out, p)
	}
	return append(out, rest)
}

// mulDivFloor is a*b/d rounded down, with the product in 128 bits; a and
// b are non-negative, b at most d, d positive, so the quotient is at most
// a.
func mulDivFloor(a, b, d int64) int64 {
	if a <= 0 || b <= 0 || d <= 0 {
		return 0
	}
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	q, _ := bits.Div64(hi, lo, uint64(d))
	return int64(q)
}
