package chargeback

import (
	"context"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/coder/quartz"

	"modelplane/auth"
	"modelplane/billing"
	"modelplane/field"
	"modelplane/readcache"
)

// Unallocated is how the CSV and the portal name the team of GPU time no
// replica held (idle GPUs and slices, billed at their own rates). Team
// names cannot contain parentheses, so it never names a team.
const Unallocated = "(unallocated)"

// Dimension is one way to group a report.
type Dimension string

// The dimensions, in their order of nesting: a report grouped by several
// lists its rows sorted by them in this order.
const (
	DimTeam       Dimension = "team"
	DimEndpoint   Dimension = "endpoint"
	DimModel      Dimension = "model"
	DimVersion    Dimension = "version"
	DimGPUType    Dimension = "gpu_type"
	DimAllocation Dimension = "allocation"
	// DimCallerTeam splits each endpoint's cost among the teams that
	// called it: in each hour, a team granted access (package grant) is
	// charged the endpoint's cost times its share of the endpoint's
	// requests (of its tokens, when the endpoint counted tokens that
	// hour), rounded down in exact integers, and the owning team keeps
	// the rest (apportion.go). A row of the owners' own use names the
	// owning team.
	DimCallerTeam Dimension = "caller_team"
	// DimGraph charges inference graphs what their steps cost: in each
	// hour, each graph endpoint whose steps called an endpoint is charged
	// that endpoint's cost times the steps' share of its requests (tokens),
	// by the same split as DimCallerTeam, the graph's team being the
	// caller team of its steps. Usage not called by a graph has graph "".
	// Grouped with DimEndpoint, a graph's rows are its per-step breakdown.
	DimGraph Dimension = "graph"
	// DimGraphVersion splits each graph's share by the graph version whose
	// steps made the calls (a canary's cost beside the incumbent's). It
	// always groups by DimGraph too: version names are per graph.
	DimGraphVersion Dimension = "graph_version"
)

// Dimensions lists every dimension in nesting order.
var Dimensions = []Dimension{DimTeam, DimEndpoint, DimModel, DimVersion, DimGPUType, DimAllocation, DimCallerTeam, DimGraph, DimGraphVersion}

// dimDay groups by UTC day; only Daily uses it.
const dimDay Dimension = "day"

// dimHour groups by the hour; only the caller_team split uses it.
const dimHour Dimension = "hour"

// column is the ClickHouse expression of a dimension in one of the tables; the allocation is the profile column ("full", "mig-1g.10gb",
// "mps-25pct", ...).
func (d Dimension) column(t table) string {
	switch d {
	case DimAllocation:
		return "profile"
	case dimHour:
		if t == tableRaw {
			return "toString(toStartOfHour(ts))"
		}
		return "toString(hour)"
	case dimDay:
		switch t {
		case tableHourly:
			return "toString(toDate(hour))"
		case tableDaily:
			return "toString(day)"
		}
		return "toString(toDate(ts))"
	}
	return string(d)
}

// hardware reports whether the dimension splits one endpoint version's
// usage by what it ran on; request statistics (tokens) cannot follow such a
// split.
func (d Dimension) hardware() bool { return d == DimGPUType || d == DimAllocation }

// ParseGroupBy reads a comma-separated list of dimensions in any order and
// returns it in nesting order without repeats. An empty string groups
// nothing (the report is its total).
func ParseGroupBy(s string) ([]Dimension, error) {
	seen := map[Dimension]bool{}
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		d := Dimension(part)
		if !slices.Contains(Dimensions, d) {
			var errs field.Errors
			errs.Add("group_by", "unknown dimension %q; use any of team, endpoint, model, version, gpu_type, allocation, caller_team, graph, graph_version", part)
			return nil, errs
		}
		seen[d] = true
	}
	return normalize(seen), nil
}

// normalize returns the dimensions seen in nesting order, with DimGraph
// added to DimGraphVersion (a version names nothing without its graph).
func normalize(seen map[Dimension]bool) []Dimension {
	if seen[DimGraphVersion] {
		seen[DimGraph] = true
	}
	out := []Dimension{}
	for _, d := range Dimensions {
		if seen[d] {
			out = append(out, d)
		}
	}
	return out
}

// Source says where a report reads usage from.
type Source int

const (
	// SourceAuto reads whole hours from the hourly rollups (usage, and
	// the request statistics that give tokens and caller shares) and the
	// partial hours at the period's ends from the raw tables.
	SourceAuto Source = iota
	// SourceRaw reads every second and every statistics window from the
	// raw tables; the benchmark and tests use it to check the rollups
	// against the records they sum.
	SourceRaw
)

// MaxPeriod bounds a report's period, so one request cannot ask ClickHouse
// for years of raw seconds at the ends.
const MaxPeriod = 400 * 24 * time.Hour

// Query selects a report: the period [From, To) in whole seconds, the
// grouping, and optional filters for drilling down.
type Query struct {
	From, To time.Time
	GroupBy  []Dimension
	// Team and Endpoint, when set, keep only that team's or endpoint's rows.
	Team, Endpoint string
	// Graph, when set, keeps only the parts charged to that graph
	// endpoint (DimGraph): its steps' shares.
	Graph  string
	Source Source
}

// Key names a report row; a dimension the report does not group by is "".
// Unallocated GPU time (an idle GPU or slice) has team "" (the CSV and the
// portal write it Unallocated).
type Key struct {
	Team, Endpoint, Model, Version, GPUType, Allocation string
	// CallerTeam is the team whose calls a row's cost is for: a granted
	// team, or the owning team (Team's value) for its own use.
	CallerTeam string
	// Graph is the inference graph endpoint whose steps a row's cost is
	// for (DimGraph); "" for calls from outside a graph.
	Graph string
	// GraphVersion is the version of Graph whose steps made the calls
	// (DimGraphVersion).
	GraphVersion string

	day  string // YYYY-MM-DD, in Daily's reads only
	hour string // the hour's start, in the caller_team split only
}

func (k *Key) set(d Dimension, v string) {
	switch d {
	case DimTeam:
		k.Team = v
	case DimEndpoint:
		k.Endpoint = v
	case DimModel:
		k.Model = v
	case DimVersion:
		k.Version = v
	case DimGPUType:
		k.GPUType = v
	case DimAllocation:
		k.Allocation = v
	case DimCallerTeam:
		k.CallerTeam = v
	case DimGraph:
		k.Graph = v
	case DimGraphVersion:
		k.GraphVersion = v
	case dimDay:
		k.day = v
	case dimHour:
		k.hour = v
	}
}

// Get returns the key's value of one dimension.
func (k Key) Get(d Dimension) string {
	switch d {
	case DimTeam:
		return k.Team
	case DimEndpoint:
		return k.Endpoint
	case DimModel:
		return k.Model
	case DimVersion:
		return k.Version
	case DimGPUType:
		return k.GPUType
	case DimAllocation:
		return k.Allocation
	case DimCallerTeam:
		return k.CallerTeam
	case DimGraph:
		return k.Graph
	case DimGraphVersion:
		return k.GraphVersion
	}
	return ""
}

// Row is the usage and cost of one group, or of the whole report.
type Row struct {
	Key
	// GPUSeconds counts allocation-seconds: a second of a whole GPU, a
	// second of one MIG slice and a second of one CPU core are each one.
	GPUSeconds int64
	// CPUCoreSeconds is the part of GPUSeconds that is CPU cores (gpu_type
	// cpu, allocation cpu-core), priced per core-hour.
	CPUCoreSeconds int64
	// CostX3600 is the exact cost in micro-USD times 3,600: the sum of the
	// per-hour rates stamped on each second.
	CostX3600 int64
	// CostMicroUSD is the cost in micro-USD under the package's rounding
	// rule; the rows of a report add up to its total.
	CostMicroUSD int64
	Requests     int64
	// Tokens is the tokens the gateways counted for the group's endpoint
	// versions; TokensKnown is false when the report splits versions by
	// hardware (tokens are not metered per GPU) or no tokens were counted.
	// The total has no tokens: it mixes endpoints with and without them.
	Tokens      int64
	TokensKnown bool
	// UtilPctSum and MemoryMBSum are summed over seconds; see AvgUtilPct.
	UtilPctSum  float64
	MemoryMBSum int64
	// CPUUtilPctSum is the part of UtilPctSum metered on CPU cores: a CPU
	// core's utilisation is not a GPU's, so AvgGPUUtilPct leaves it out.
	CPUUtilPctSum float64
}

// GPUOnlySeconds is the GPU allocation-seconds (whole GPUs, MIG slices, MPS
// shares) without the CPU core-seconds GPUSeconds also counts: what a
// report calls GPU time.
func (r Row) GPUOnlySeconds() int64 { return r.GPUSeconds - r.CPUCoreSeconds }

// GPUOnlyHours is GPUOnlySeconds as hours, written as GPUHours is.
func (r Row) GPUOnlyHours() string { return ratio(r.GPUOnlySeconds(), 3600, 6) }

// AvgGPUUtilPct is the mean GPU utilisation over the group's GPU seconds;
// ok is false when the group held no GPU (CPU cores only), where GPU
// utilisation was not measured.
func (r Row) AvgGPUUtilPct() (pct float64, ok bool) {
	n := r.GPUOnlySeconds()
	if n <= 0 {
		return 0, false
	}
	return (r.UtilPctSum - r.CPUUtilPctSum) / float64(n), true
}

// GPUHours is GPU-seconds as hours, exact to the second, as a decimal
// string ("12.5", "0.000278" rounded to six places).
func (r Row) GPUHours() string { return ratio(r.GPUSeconds, 3600, 6) }

// CPUCoreHours is CPUCoreSeconds as hours, written as GPUHours is.
func (r Row) CPUCoreHours() string { return ratio(r.CPUCoreSeconds, 3600, 6) }

// AvgUtilPct is the mean GPU utilisation over the group's seconds.
func (r Row) AvgUtilPct() float64 {
	if r.GPUSeconds == 0 {
		return 0
	}
	return r.UtilPctSum / float64(r.GPUSeconds)
}

// AvgMemoryMB is the mean memory in use over the group's seconds.
func (r Row) AvgMemoryMB() float64 {
	if r.GPUSeconds == 0 {
		return 0
	}
	return float64(r.MemoryMBSum) / float64(r.GPUSeconds)
}

// CostPer1kRequestsMicroUSD is the cost of a thousand requests in micro-USD,
// rounded half up; ok is false without requests.
func (r Row) CostPer1kRequestsMicroUSD() (int64, bool) {
	if r.Requests == 0 {
		return 0, false
	}
	return mulDivRound(r.CostMicroUSD, 1000, r.Requests), true
}

// CostPer1MTokensMicroUSD is the cost of a million tokens in micro-USD,
// rounded half up; ok is false when tokens are not known for the row.
func (r Row) CostPer1MTokensMicroUSD() (int64, bool) {
	if !r.TokensKnown || r.Tokens == 0 {
		return 0, false
	}
	return mulDivRound(r.CostMicroUSD, 1_000_000, r.Tokens), true
}

func (r *Row) add(o Row) {
	r.GPUSeconds += o.GPUSeconds
	r.CPUCoreSeconds += o.CPUCoreSeconds
	r.CostX3600 += o.CostX3600
	r.Requests += o.Requests
	r.UtilPctSum += o.UtilPctSum
	r.MemoryMBSum += o.MemoryMBSum
	r.CPUUtilPctSum += o.CPUUtilPctSum
}

// Report is usage and cost over a period.
type Report struct {
	From, To time.Time
	GroupBy  []Dimension
	// Rows are sorted by the grouped dimensions in nesting order.
	Rows  []Row
	Total Row
	// RatesVersion identifies the rate table the report was read under: the
	// id of the newest cost_rates row ("r0" with none).
	RatesVersion string
	// Newest is the newest usage second stored in the last LagWindow (zero
	// when none is, or when the period ended before the last LagWindow and
	// was not checked), and Delayed is true when the period reaches past it
	// by more than the service's lag allowance: recent seconds may still be
	// on their way.
	Newest  time.Time
	Delayed bool
}

// LagWindow is how far back a report looks for the newest usage second.
// A period that ended before it is taken as complete (its seconds were
// stored long ago), and ingest silent for all of it means delayed.
const LagWindow = time.Hour

// Service reads reports from ClickHouse.
type Service struct {
	ch    driver.Conn
	rates RateTable
	clock quartz.Clock
	// LagAllowance is how far behind now the newest stored second may be
	// before a report reaching now is marked delayed; default 2 minutes.
	LagAllowance time.Duration
	// beforeRead, when set (tests only), runs after a report planned its
	// spans and before it reads them: where a reseal can strike.
	beforeRead func()
	// rawStats reads request statistics from the raw windows whatever the
	// query's Source (RawStatistics).
	rawStats bool
	// closed keeps reports of periods that ended before the last
	// LagWindow (WithCache); nil reads every report.
	closed *readcache.Cache[reportKey, *Report]
	// newest keeps the newest stored usage second for NewestFresh, at most
	// NewestMaxAge (WithCache); nil reads it for every report.
	newest *readcache.Cache[struct{}, time.Time]
}

// NewestFresh and NewestMaxAge bound the newest usage second a report
// reaching into the last LagWindow shows (WithCache): every such report
// reads it, and under 50 clients that read took 0.4 s of the portal's
// month report (docs/operations.md). A report's Delayed flag allows
// LagAllowance (2 minutes by default), which a few seconds' staleness
// does not move much.
const (
	NewestFresh  = 5 * time.Second
	NewestMaxAge = 15 * time.Second
)

// ClosedFresh and ClosedMaxAge bound a cached report of a closed period
// (WithCache): usage still reaches such a period when ingest catches up
// after an outage (JetStream redelivers for 7 days) or an agent replays
// its disk spool, and shows in the report at most ClosedMaxAge after it
// is stored.
const (
	ClosedFresh  = time.Minute
	ClosedMaxAge = 10 * time.Minute
)

// reportKey names everything a report depends on besides the usage: the
// caller's scope, the query and the rate table's version.
type reportKey struct {
	all                   bool
	teams                 string
	from, to              int64
	groupBy               string
	team, endpoint, graph string
	rates                 string
}

// newestUsage is the newest usage second stored since since: from newest
// within its bounds (WithCache), else read now.
func (s *Service) newestUsage(ctx context.Context, since time.Time) (time.Time, error) {
	read := func(ctx context.Context) (time.Time, error) {
		var t time.Time
		err := s.ch.QueryRow(ctx, "SELECT max(ts) FROM gpu_usage WHERE ts >= ?", since).Scan(&t)
		return t, err
	}
	if s.newest == nil {
		return read(ctx)
	}
	a, err := s.newest.Get(ctx, struct{}{}, read)
	return a.Value, err
}

// WithCache returns a copy of s that serves reports of periods that ended
// before the last LagWindow from a cache bounded by opts (its clock s's):
// a month by caller team reads the month's hourly rows of every endpoint
// involved and splits them hour by hour, and such a period changes only
// when late usage arrives. Reports that reach into the last LagWindow,
// and those with SourceRaw, are read every time.
func (s *Service) WithCache(opts readcache.Options) *Service {
	c := *s
	opts.Clock = s.clock
	c.closed = readcache.New[reportKey, *Report](opts)
	c.newest = readcache.New[struct{}, time.Time](readcache.Options{Clock: s.clock, Fresh: NewestFresh, MaxAge: NewestMaxAge})
	return &c
}

// RawStatistics returns a copy of s that reads the tokens and caller
// shares of every report from the raw statistics windows, as reports did
// before ClickHouse migration 0013, usage still from the rollups: the
// benchmark's baseline for the pages that read reports.
func (s *Service) RawStatistics() *Service {
	c := *s
	c.rawStats = true
	c.closed, c.newest = nil, nil
	return &c
}

// RateTable reads the cost rates: whole for advice, and the newest id for
// a report's rates version. *db.Queries is one.
type RateTable interface {
	billing.Lister
	CostRateMaxID(ctx context.Context) (int64, error)
}

// New returns a Service. rates gives the rate table's version (and may be
// nil, for version "r0"); clock is what reports measure lag with
// (quartz.NewReal() when nil).
func New(ch driver.Conn, rates RateTable, clock quartz.Clock) *Service {
	if clock == nil {
		clock = quartz.NewReal()
	}
	return &Service{ch: ch, rates: rates, clock: clock, LagAllowance: 2 * time.Minute}
}

// scope returns the teams the principal may see: all, or the named ones.
func scope(p *auth.Principal) (all bool, teams []string) {
	if p.Finance() {
		return true, nil
	}
	teams = []string{}
	for _, m := range p.Teams {
		teams = append(teams, m.Team)
	}
	return false, teams
}

// check validates a query's period.
func (q *Query) check() error {
	var errs field.Errors
	if q.From.IsZero() || q.To.IsZero() {
		errs.Add("from", "from and to are both required")
		return errs
	}
	q.From, q.To = q.From.UTC().Truncate(time.Second), q.To.UTC().Truncate(time.Second)
	if slices.Contains(q.GroupBy, DimGraphVersion) && !slices.Contains(q.GroupBy, DimGraph) {
		seen := map[Dimension]bool{}
		for _, d := range q.GroupBy {
			seen[d] = true
		}
		q.GroupBy = normalize(seen)
	}
	if !q.To.After(q.From) {
		errs.Add("to", "must be after from")
	} else if q.To.Sub(q.From) > MaxPeriod {
		errs.Add("to", "the period may be at most %d days", int(MaxPeriod/(24*time.Hour)))
	}
	return errs.Err()
}

// Report answers q for p: finance and platform admins see every team,
// anyone else only their own teams' rows, in the rows and in the totals.
func (s *Service) Report(ctx context.Context, p *auth.Principal, q Query) (*Report, error) {
	if err := q.check(); err != nil {
		return nil, err
	}
	version, err := s.ratesVersion(ctx)
	if err != nil {
		return nil, err
	}
	all, teams := scope(p)
	if s.closed == nil || q.Source != SourceAuto || q.To.After(s.clock.Now().Add(-LagWindow)) {
		return s.report(ctx, all, teams, q, version)
	}
	key := reportKey{all: all, teams: strings.Join(teams, "\x00"), from: q.From.Unix(), to: q.To.Unix(),
		team: q.Team, endpoint: q.Endpoint, graph: q.Graph, rates: version}
	for _, d := range q.GroupBy {
		key.groupBy += string(d) + ","
	}
	a, err := s.closed.Get(ctx, key, func(ctx context.Context) (*Report, error) {
		return s.report(ctx, all, teams, q, version)
	})
	if err != nil {
		return nil, err
	}
	// Callers may change what they get; the cached report stays as read.
	rep := *a.Value
	rep.GroupBy = slices.Clone(rep.GroupBy)
	rep.Rows = slices.Clone(rep.Rows)
	return &rep, nil
}

// report reads q for a caller who sees every team (all) or teams.
func (s *Service) report(ctx context.Context, all bool, teams []string, q Query, version string) (*Report, error) {
	rep := &Report{From: q.From, To: q.To, GroupBy: q.GroupBy, Rows: []Row{}, RatesVersion: version}
	var err error
	if !all && len(teams) == 0 {
		return rep, nil
	}
	f := filter{all: all, teams: teams, team: q.Team, endpoint: q.Endpoint}
	byGraph := slices.Contains(q.GroupBy, DimGraph) || q.Graph != ""
	byCaller := slices.Contains(q.GroupBy, DimCallerTeam) || byGraph
	graphs := splitNone
	switch {
	case slices.Contains(q.GroupBy, DimGraphVersion):
		graphs = splitGraphVersion
	case byGraph:
		graphs = splitGraph
	}
	tokens := !byCaller && !slices.ContainsFunc(q.GroupBy, Dimension.hardware)
	// The query's grain: the grouping, plus team, endpoint and version
	// when the rows can carry tokens (tokens are counted per endpoint
	// version of a team), or team, endpoint and hour when the rows are
	// split by caller team (the split is per endpoint and hour).
	grain := slices.DeleteFunc(slices.Clone(q.GroupBy), func(d Dimension) bool { return d == DimCallerTeam || d == DimGraph || d == DimGraphVersion })
	statsSrc := q.Source
	if s.rawStats {
		statsSrc = SourceRaw
	}
	if byCaller {
		// A consumer sees its share of other teams' endpoints: the
		// split reads the usage of the teams' own endpoints and of the
		// endpoints they called, and keeps the visible rows (a row of an
		// endpoint neither theirs nor called by them has no visible
		// part).
		if !all {
			if f.called, err = s.calledBy(ctx, teams, q.From, q.To, statsSrc); err != nil {
				return nil, err
			}
		}
		for _, d := range []Dimension{DimTeam, DimEndpoint, dimHour} {
			if !slices.Contains(grain, d) {
				grain = append(grain, d)
			}
		}
	}
	if tokens {
		for _, d := range []Dimension{DimTeam, DimEndpoint, DimVersion} {
			if !slices.Contains(grain, d) {
				grain = append(grain, d)
			}
		}
	}
	fine, err := s.usage(ctx, grain, f, q.From, q.To, q.Source)
	if err != nil {
		return nil, err
	}
	if byCaller {
		if fine, err = s.apportion(ctx, fine, f, q.From, q.To, graphs, statsSrc); err != nil {
			return nil, err
		}
		if q.Graph != "" {
			fine = slices.DeleteFunc(fine, func(r Row) bool { return r.Graph != q.Graph })
		}
		if !all {
			fine = slices.DeleteFunc(fine, func(r Row) bool {
				return !slices.Contains(teams, r.Team) && !slices.Contains(teams, r.CallerTeam)
			})
		}
	}
	var tok map[[3]string]int64
	if tokens && len(fine) > 0 {
		if tok, err = s.tokens(ctx, f, q.From, q.To, statsSrc); err != nil {
			return nil, err
		}
	}
	groups := map[Key]*Row{}
	for _, r := range fine {
		k := Key{}
		for _, d := range q.GroupBy {
			k.set(d, r.Get(d))
		}
		g := groups[k]
		if g == nil {
			g = &Row{Key: k, TokensKnown: tokens}
			groups[k] = g
		}
		g.add(r)
		if tokens {
			g.Tokens += tok[[3]string{r.Team, r.Endpoint, r.Version}]
		}
	}
	for _, g := range groups {
		if g.Tokens == 0 {
			g.TokensKnown = false
		}
		rep.Rows = append(rep.Rows, *g)
		rep.Total.add(*g)
	}
	sort.Slice(rep.Rows, func(i, j int) bool { return less(q.GroupBy, rep.Rows[i].Key, rep.Rows[j].Key) })
	rep.Total.CostMicroUSD = Allocate(rep.Total.CostX3600, rep.Rows)
	if err := s.freshness(ctx, rep); err != nil {
		return nil, err
	}
	return rep, nil
}

// less orders keys by the grouped dimensions in nesting order.
func less(by []Dimension, a, b Key) bool {
	for _, d := range by {
		if x, y := a.Get(d), b.Get(d); x != y {
			return x < y
		}
	}
	return false
}

// Allocate applies the rounding rule: it returns the total's micro-USD,
// the exact numerator divided by 3,600 and rounded half up, and sets each
// row's CostMicroUSD to its exact cost rounded down plus one for the rows
// with the largest remainders (ties to the earlier row) until the rows add
// up to the total. rows must hold the total's numerator between them.
func Allocate(totalX3600 int64, rows []Row) int64 {
	total := divRound(totalX3600, 3600)
	sum := int64(0)
	order := make([]int, len(rows))
	for i := range rows {
		rows[i].CostMicroUSD = rows[i].CostX3600 / 3600
		sum += rows[i].CostMicroUSD
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return rows[order[a]].CostX3600%3600 > rows[order[b]].CostX3600%3600 })
	// total - sum is at most the number of rows with a remainder: each
	// remainder is under 3600 and together they are what rounding adds.
	for i := 0; sum < total && i < len(order); i++ {
		rows[order[i]].CostMicroUSD++
		sum++
	}
	return total
}

// divRound divides half up; n and d are non-negative, d positive.
func divRound(n, d int64) int64 { return (n + d/2) / d }

// mulDivRound is a*b/d rounded half up, with the product in 128 bits so
// that it cannot wrap (a month's cost in micro-USD times a million, or
// times the seconds of a month, passes int64 from a few million dollars).
// a and b are non-negative, d positive; a quotient beyond int64 is
// math.MaxInt64.
func mulDivRound(a, b, d int64) int64 {
	if a < 0 || b < 0 || d <= 0 {
		// Not reached by reports (costs, counts and durations are not
		// negative); the plain arithmetic keeps a defined answer.
		return divRound(a*b, d)
	}
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	ud := uint64(d)
	if hi >= ud {
		return math.MaxInt64
	}
	q, r := bits.Div64(hi, lo, ud)
	if r >= ud-r { // 2r >= d without overflow: the half rounds up
		q++
	}
	if q > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(q)
}

// ratio writes n/d as a decimal rounded half up to places digits, with
// trailing zeros dropped.
func ratio(n, d int64, places int) string {
	scale := int64(1)
	for range places {
		scale *= 10
	}
	v := mulDivRound(n, scale, d)
	return decimal(v, places)
}

// decimal writes v / 10^places exactly, trailing zeros dropped.
func decimal(v int64, places int) string {
	neg := v < 0
	if neg {
		v = -v
	}
	s := fmt.Sprintf("%0*d", places+1, v)
	i, f := s[:len(s)-places], strings.TrimRight(s[len(s)-places:], "0")
	out := i
	if f != "" {
		out += "." + f
	}
	if neg {
		out = "-" + out
	}
	return out
}

// ratesVersion is the id of the newest rate row, asked of the database
// rather than found by reading every rate.
func (s *Service) ratesVersion(ctx context.Context) (string, error) {
	if s.rates == nil {
		return "r0", nil
	}
	id, err := s.rates.CostRateMaxID(ctx)
	if err != nil {
		return "", fmt.Errorf("rates version: %w", err)
	}
	return fmt.Sprintf("r%d", id), nil
}
