package chargeback

import (
	"cmp"
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

// caller is who an endpoint's calls are for: a caller team ("" the
// owners) and the graph endpoint and version whose steps they were (""
// for calls from outside a graph, and when the report does not split by
// graph or by its version).
type caller struct {
	team, graph, graphVersion string
}

// graphSplit says how far the callers of an endpoint are told apart
// beyond their team.
type graphSplit int

const (
	splitNone graphSplit = iota
	// splitGraph tells graphs apart (via_graph).
	splitGraph
	// splitGraphVersion tells graphs and their versions apart
	// (via_graph_version too).
	splitGraphVersion
)

// useKey names an endpoint of a team in an hour.
type useKey struct {
	team, endpoint, hour string
}

// callers reads the requests and tokens of request statistics per owning
// team, endpoint, hour, caller team ("" is the owners' own) and the
// graph (via_graph) and graph version (via_graph_version) as far as by
// splits them, in [from, to): whole hours from request_stats_hourly, the
// partial hours at the ends from request_stats (statsSpans).
func (s *Service) callers(ctx context.Context, f filter, from, to time.Time, by graphSplit, src Source) (map[useKey]map[caller]callerUse, error) {
	out := map[useKey]map[caller]callerUse{}
	for _, sp := range statsSpans(from, to, src) {
		if err := s.callersIn(ctx, out, f, sp, by); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// callersIn adds the callers of span sp to out.
func (s *Service) callersIn(ctx context.Context, out map[useKey]map[caller]callerUse, f filter, sp span, by graphSplit) error {
	cond, args := f.where()
	graph, version := "''", "''"
	if by >= splitGraph {
		graph = "via_graph"
	}
	if by == splitGraphVersion {
		version = "via_graph_version"
	}
	tbl, hour, at := sp.statsTable()
	rows, err := s.ch.Query(ctx, "SELECT team, endpoint, toString("+hour+") AS h, caller_team, "+graph+" AS g, "+version+" AS gv, sum(requests), sum(tokens) "+
		"FROM "+tbl+" WHERE "+at+" >= ? AND "+at+" < ?"+cond+" GROUP BY team, endpoint, h, caller_team, g, gv",
		append([]any{sp.from.UTC(), sp.to.UTC()}, args...)...)
	if err != nil {
		return fmt.Errorf("chargeback callers: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var k useKey
		var c caller
		var n, tok uint64
		if err := rows.Scan(&k.team, &k.endpoint, &k.hour, &c.team, &c.graph, &c.graphVersion, &n, &tok); err != nil {
			return fmt.Errorf("chargeback callers: %w", err)
		}
		if c.team == k.team {
			c.team = ""
		}
		m := out[k]
		if m == nil {
			m = map[caller]callerUse{}
			out[k] = m
		}
		u := m[c]
		u.requests += int64(n)
		u.tokens += int64(tok)
		m[c] = u
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("chargeback callers: %w", err)
	}
	return nil
}

// apportion splits each usage row (at a grain with team, endpoint and
// hour) among the teams that called its endpoint in its hour, and when
// by says so among the graphs (and graph versions) whose steps called it,
// and sets each part's CallerTeam, Graph and GraphVersion.
func (s *Service) apportion(ctx context.Context, rows []Row, f filter, from, to time.Time, by graphSplit, src Source) ([]Row, error) {
	if len(rows) == 0 {
		return rows, nil
	}
	uses, err := s.callers(ctx, f, from, to, by, src)
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
// granted team, and each graph whose steps called the endpoint (the
// owners' graphs too), gets the row's cost numerator, GPU and CPU seconds,
// requests and memory times its share of the hour's requests (of its
// tokens when any were counted), rounded down in exact integers, and
// utilisation by the same share; the owning team (r.Team) keeps the rest,
// its own calls from outside a graph and the remainders of the rounding,
// so the parts add up exactly to r. uses are by caller, team "" the
// owners. A graph's part names the graph's team (the caller team of its
// steps) as CallerTeam. Rows without calls stay whole with the owners.
func split(r Row, uses map[caller]callerUse) []Row {
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
	names := make([]caller, 0, len(uses))
	for c, u := range uses {
		total += weight(u)
		if c.graph != "" || (c.team != "" && c.team != r.Team) {
			names = append(names, c)
		}
	}
	if total <= 0 || len(names) == 0 {
		return []Row{rest}
	}
	slices.SortFunc(names, func(a, b caller) int {
		return cmp.Or(cmp.Compare(a.team, b.team), cmp.Compare(a.graph, b.graph), cmp.Compare(a.graphVersion, b.graphVersion))
	})
	out := make([]Row, 0, len(names)+1)
	for _, c := range names {
		w := weight(uses[c])
		if w <= 0 {
			continue
		}
		p := Row{Key: r.Key}
		p.CallerTeam = c.team
		if c.team == "" {
			p.CallerTeam = r.Team
		}
		p.Graph, p.GraphVersion = c.graph, c.graphVersion
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
