package chargeback_test

import (
	"bytes"
	"flag"
	"math"
	"math/bits"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/coder/quartz"

	"modelplane/auth"
	"modelplane/billing"
	"modelplane/chargeback"
	"modelplane/internal/chtest"
	"modelplane/internal/pgtest"
)

var update = flag.Bool("update", false, "rewrite the CSV golden file")

func TestMain(m *testing.M) {
	code := m.Run()
	chtest.Stop()
	pgtest.Stop()
	os.Exit(code)
}

// rec is one usage second as the ingest consumer stores it.
type rec struct {
	ts                                           time.Time
	node                                         string
	gpu, slice                                   uint16
	gpuType, profile, team, endpoint, model, ver string
	util                                         float32
	memMB, requests                              uint64
	rate                                         uint64
}

// clockAt is a hand-moved clock standing at at.
func clockAt(t *testing.T, at time.Time) *quartz.Mock {
	clk := quartz.NewMock(t)
	clk.Set(at)
	return clk
}

func insert(t *testing.T, ch driver.Conn, rows []rec) {
	t.Helper()
	ctx := t.Context()
	b, err := ch.PrepareBatch(ctx, "INSERT INTO gpu_usage (ts, node, gpu, slice, gpu_type, profile, team, endpoint, model, version, replica, "+
		"util_pct, memory_mb, requests, rate_uusd_per_hour, batch_id, row_idx)")
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range rows {
		replica := ""
		if r.endpoint != "" {
			replica = r.endpoint + "-" + r.ver + "-0"
		}
		if err := b.Append(r.ts, r.node, r.gpu, r.slice, r.gpuType, r.profile, r.team, r.endpoint, r.model, r.ver, replica,
			r.util, r.memMB, r.requests, r.rate, "test", uint32(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Send(); err != nil {
		t.Fatal(err)
	}
}

var (
	finance = &auth.Principal{Name: "fin@example.com", PlatformRole: auth.RoleFinance}
	riskEng = &auth.Principal{Name: "eng@example.com", Teams: []auth.Membership{{TeamID: 1, Team: "risk", Role: auth.RoleEngineer}}}
	t0      = time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC)
)

// allocation is one GPU or slice and what it serves.
type allocation struct {
	node                                  string
	gpu, slice                            uint16
	gpuType, profile, team, endpoint, ver string
	rate                                  uint64
}

// fleetUsage is every second of [from, to) for a small mixed fleet: whole
// GPUs and MIG slices of two teams, an idle GPU and an idle slice, at rates
// chosen so that nearly every group's cost has a remainder.
func fleetUsage(from, to time.Time) []rec {
	allocs := []allocation{
		{"n1", 0, 0, "A100-80GB", "full", "risk", "fraud", "v1", 3_500_001},
		{"n1", 1, 0, "A100-80GB", "full", "risk", "fraud", "v2", 3_500_001},
		{"n1", 2, 1, "A100-80GB", "mig-1g.10gb", "risk", "score", "v7", 500_003},
		{"n1", 2, 2, "A100-80GB", "mig-3g.40gb", "search", "rank", "v1", 1_750_007},
		{"n2", 0, 0, "H100-80GB", "full", "search", "chat", "v3", 5_500_011},
		{"n2", 1, 1, "H100-80GB", "mig-1g.10gb", "search", "embed", "v1", 800_013},
		{"n2", 2, 0, "H100-80GB", "full", "", "", "", 5_500_011},      // idle GPU
		{"n2", 1, 2, "H100-80GB", "mig-1g.10gb", "", "", "", 800_013}, // idle slice
	}
	rng := rand.New(rand.NewPCG(7, 11))
	var out []rec
	for s := from; s.Before(to); s = s.Add(time.Second) {
		for _, a := range allocs {
			r := rec{ts: s, node: a.node, gpu: a.gpu, slice: a.slice, gpuType: a.gpuType, profile: a.profile, team: a.team,
				endpoint: a.endpoint, model: a.endpoint + "-model", ver: a.ver, rate: a.rate}
			if a.team == "" {
				r.model = ""
			} else {
				r.util = float32(rng.IntN(100))
				r.memMB = uint64(rng.IntN(10_000))
				r.requests = uint64(rng.IntN(5))
			}
			out = append(out, r)
		}
	}
	return out
}

// exact sums the per-second records of [from, to) visible to the teams
// (nil: all) into seconds and the cost numerator.
func exact(rows []rec, from, to time.Time, teams []string) (seconds, x3600 int64) {
	for _, r := range rows {
		if r.ts.Before(from) || !r.ts.Before(to) {
			continue
		}
		if teams != nil && !contains(teams, r.team) {
			continue
		}
		seconds++
		x3600 += int64(r.rate)
	}
	return seconds, x3600
}

func contains(xs []string, x string) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

// groupings returns the groupings a test checks: no dimension, each
// dimension alone, every pair, every set but one and all of them, in
// nesting order. That is 56 of the 512 subsets: each dimension's own
// columns and joins (the caller-team split, the graph's) and each
// two-way interaction are covered, as are the widest keys; all 512 made
// the package's tests take three minutes under -race.
func groupings() [][]chargeback.Dimension {
	n := len(chargeback.Dimensions)
	var out [][]chargeback.Dimension
	for mask := range 1 << n {
		if k := bits.OnesCount(uint(mask)); k > 2 && k < n-1 {
			continue
		}
		var s []chargeback.Dimension
		for i, d := range chargeback.Dimensions {
			if mask&(1<<i) != 0 {
				s = append(s, d)
			}
		}
		out = append(out, s)
	}
	return out
}

// TestTotalsExactWhateverTheGrouping bills 2 h 20 min of a mixed fleet over
// periods that start and end mid-hour, under each of groupings(), from the
// rollup with raw ends and from raw rows alone: every total is the per-second
// records' numerator divided by 3,600 and rounded once, and the rows add up
// to it to the micro-dollar.
func TestTotalsExactWhateverTheGrouping(t *testing.T) {
	t.Parallel()
	ch := chtest.New(t)
	from, to := t0.Add(50*time.Minute), t0.Add(3*time.Hour+10*time.Minute)
	rows := fleetUsage(from, to)
	insert(t, ch, rows)
	svc := chargeback.New(ch, nil, clockAt(t, to))
	periods := []struct{ from, to time.Time }{
		{from, to}, // raw ends around two whole hours
		{t0.Add(time.Hour), t0.Add(3 * time.Hour)},           // whole hours only
		{t0.Add(61 * time.Minute), t0.Add(62 * time.Minute)}, // inside one hour
		{t0.Add(59*time.Minute + 59*time.Second), t0.Add(2*time.Hour + time.Second)},
	}
	for _, p := range periods {
		wantSec, wantX := exact(rows, p.from, p.to, nil)
		wantCost := (wantX + 1800) / 3600
		for _, by := range groupings() {
			for _, src := range []chargeback.Source{chargeback.SourceAuto, chargeback.SourceRaw} {
				rep, err := svc.Report(t.Context(), finance, chargeback.Query{From: p.from, To: p.to, GroupBy: by, Source: src})
				if err != nil {
					t.Fatal(err)
				}
				if rep.Total.GPUSeconds != wantSec || rep.Total.CostX3600 != wantX || rep.Total.CostMicroUSD != wantCost {
					t.Fatalf("%s–%s by %v source %d: total %d s, %d x3600, %d µUSD; want %d s, %d, %d",
						p.from.Format(time.TimeOnly), p.to.Format(time.TimeOnly), by, src,
						rep.Total.GPUSeconds, rep.Total.CostX3600, rep.Total.CostMicroUSD, wantSec, wantX, wantCost)
				}
				var sum, sumSec int64
				for _, r := range rep.Rows {
					sum += r.CostMicroUSD
					sumSec += r.GPUSeconds
					if d := r.CostMicroUSD*3600 - r.CostX3600; d <= -3600 || d >= 3600 {
						t.Fatalf("by %v: row %+v is %d/3600 µUSD off its exact cost", by, r.Key, d)
					}
				}
				if sum != wantCost || sumSec != wantSec {
					t.Fatalf("by %v source %d: rows add up to %d µUSD, %d s; want %d, %d", by, src, sum, sumSec, wantCost, wantSec)
				}
			}
		}
	}
}

// TestRateChangeSplitsAtTheSecond enters a price change at 14:23:17 on the
// 15th, stamps a month of one GPU's seconds with billing's rate table the
// way ingest does, and checks the month's bill is the seconds before the
// change at the old rate plus the seconds from it on at the new one.
func TestRateChangeSplitsAtTheSecond(t *testing.T) {
	t.Parallel()
	ch := chtest.New(t)
	const old, cur = 3_500_000, 4_100_000
	change := time.Date(2026, 10, 15, 14, 23, 17, 0, time.UTC)
	rates := billing.NewRates([]billing.Rate{
		{GPUType: "A100-80GB", Profile: "full", UUSDPerHour: old, EffectiveFrom: time.Unix(0, 0)},
		{GPUType: "A100-80GB", Profile: "full", UUSDPerHour: cur, EffectiveFrom: change},
	})
	// Every 60th second of the month plus every second of the hour around
	// the change keeps the insert small and the split exact to the second.
	monthEnd := t0.AddDate(0, 1, 0)
	var rows []rec
	var before, after int64
	add := func(s time.Time) {
		rate, ok := rates.At("A100-80GB", "full", s)
		if !ok {
			t.Fatal("no rate")
		}
		rows = append(rows, rec{ts: s, node: "n1", gpuType: "A100-80GB", profile: "full", team: "risk", endpoint: "fraud", model: "m", ver: "v1", rate: uint64(rate)})
		if s.Before(change) {
			before++
		} else {
			after++
		}
	}
	hour := change.Truncate(time.Hour)
	for s := t0; s.Before(monthEnd); s = s.Add(time.Minute) {
		if s.Before(hour) || !s.Before(hour.Add(time.Hour)) {
			add(s)
		}
	}
	for s := hour; s.Before(hour.Add(time.Hour)); s = s.Add(time.Second) {
		add(s)
	}
	insert(t, ch, rows)
	svc := chargeback.New(ch, nil, clockAt(t, monthEnd))
	rep, err := svc.Report(t.Context(), finance, chargeback.Query{From: t0, To: monthEnd, GroupBy: []chargeback.Dimension{chargeback.DimTeam}})
	if err != nil {
		t.Fatal(err)
	}
	wantX := before*old + after*cur
	if rep.Total.CostX3600 != wantX || rep.Total.CostMicroUSD != (wantX+1800)/3600 {
		t.Fatalf("month = %d x3600 (%d µUSD), want %d s at %d + %d s at %d = %d", rep.Total.CostX3600, rep.Total.CostMicroUSD, before, old, after, cur, wantX)
	}
	// The change's own hour, billed alone: 1,397 s (14:00:00–14:23:16) at
	// the old rate, 2,203 s at the new one.
	rep, err = svc.Report(t.Context(), finance, chargeback.Query{From: hour, To: hour.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(1397*old + 2203*cur); rep.Total.CostX3600 != want {
		t.Fatalf("hour of the change = %d x3600, want %d", rep.Total.CostX3600, want)
	}
}

// TestSlicesAndIdlePricedByOwnRates bills one hour grouped by GPU type and
// allocation: each MIG profile and each idle GPU is its own seconds times
// its own rate, not a share of a full GPU's.
func TestSlicesAndIdlePricedByOwnRates(t *testing.T) {
	t.Parallel()
	ch := chtest.New(t)
	from, to := t0, t0.Add(time.Hour)
	insert(t, ch, fleetUsage(from, to))
	svc := chargeback.New(ch, nil, clockAt(t, to))
	rep, err := svc.Report(t.Context(), finance, chargeback.Query{From: from, To: to,
		GroupBy: []chargeback.Dimension{chargeback.DimTeam, chargeback.DimGPUType, chargeback.DimAllocation}})
	if err != nil {
		t.Fatal(err)
	}
	want := map[chargeback.Key]int64{ // seconds × rate
		{Team: "", GPUType: "H100-80GB", Allocation: "full"}:              3600 * 5_500_011,
		{Team: "", GPUType: "H100-80GB", Allocation: "mig-1g.10gb"}:       3600 * 800_013,
		{Team: "risk", GPUType: "A100-80GB", Allocation: "full"}:          2 * 3600 * 3_500_001,
		{Team: "risk", GPUType: "A100-80GB", Allocation: "mig-1g.10gb"}:   3600 * 500_003,
		{Team: "search", GPUType: "A100-80GB", Allocation: "mig-3g.40gb"}: 3600 * 1_750_007,
		{Team: "search", GPUType: "H100-80GB", Allocation: "full"}:        3600 * 5_500_011,
		{Team: "search", GPUType: "H100-80GB", Allocation: "mig-1g.10gb"}: 3600 * 800_013,
	}
	if len(rep.Rows) != len(want) {
		t.Fatalf("%d rows, want %d: %+v", len(rep.Rows), len(want), rep.Rows)
	}
	for _, r := range rep.Rows {
		if w, ok := want[r.Key]; !ok || r.CostX3600 != w || r.CostMicroUSD != w/3600 {
			t.Errorf("%+v: %d x3600, %d µUSD; want %d, %d", r.Key, r.CostX3600, r.CostMicroUSD, w, w/3600)
		}
	}
}

// TestTeamScoping: a risk engineer sees only risk's rows, and the totals
// are risk's alone (no other team, no idle GPUs); a drill-down into another
// team gives nothing; finance sees all.
func TestTeamScoping(t *testing.T) {
	t.Parallel()
	ch := chtest.New(t)
	from, to := t0.Add(30*time.Minute), t0.Add(2*time.Hour)
	rows := fleetUsage(from, to)
	insert(t, ch, rows)
	svc := chargeback.New(ch, nil, clockAt(t, to))
	for _, by := range groupings() {
		rep, err := svc.Report(t.Context(), riskEng, chargeback.Query{From: from, To: to, GroupBy: by})
		if err != nil {
			t.Fatal(err)
		}
		sec, x := exact(rows, from, to, []string{"risk"})
		if rep.Total.GPUSeconds != sec || rep.Total.CostX3600 != x {
			t.Fatalf("by %v: risk total %d s, %d; want %d, %d", by, rep.Total.GPUSeconds, rep.Total.CostX3600, sec, x)
		}
		for _, r := range rep.Rows {
			if r.Team != "" && r.Team != "risk" || r.Endpoint != "" && r.Endpoint != "fraud" && r.Endpoint != "score" {
				t.Fatalf("by %v: risk engineer sees %+v", by, r.Key)
			}
		}
	}
	rep, err := svc.Report(t.Context(), riskEng, chargeback.Query{From: from, To: to, Team: "search", GroupBy: []chargeback.Dimension{chargeback.DimEndpoint}})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Rows) != 0 || rep.Total.GPUSeconds != 0 {
		t.Fatalf("drill-down into search: %+v, total %+v; want nothing", rep.Rows, rep.Total)
	}
	nobody := &auth.Principal{Name: "new@example.com"}
	if rep, err = svc.Report(t.Context(), nobody, chargeback.Query{From: from, To: to}); err != nil || rep.Total.GPUSeconds != 0 {
		t.Fatalf("no teams: %+v, %v; want an empty report", rep, err)
	}
	rep, err = svc.Report(t.Context(), finance, chargeback.Query{From: from, To: to})
	if err != nil {
		t.Fatal(err)
	}
	if sec, x := exact(rows, from, to, nil); rep.Total.GPUSeconds != sec || rep.Total.CostX3600 != x {
		t.Fatalf("finance total %d s, %d; want %d, %d", rep.Total.GPUSeconds, rep.Total.CostX3600, sec, x)
	}
}

// TestCSVGolden writes an hour and a half by team, endpoint and version,
// with the tokens a gateway counted for one version, and compares it with
// testdata/report.csv (go test -update rewrites it).
func TestCSVGolden(t *testing.T) {
	t.Parallel()
	ch := chtest.New(t)
	from, to := t0, t0.Add(90*time.Minute)
	insert(t, ch, fleetUsage(from, to))
	b, err := ch.PrepareBatch(t.Context(), "INSERT INTO request_stats (window_start, window_end, endpoint, team, version, requests, tokens)")
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Append(t0.Add(time.Minute), t0.Add(time.Minute+5*time.Second), "chat", "search", "v3", uint64(40), uint64(1_234_567)); err != nil {
		t.Fatal(err)
	}
	if err := b.Send(); err != nil {
		t.Fatal(err)
	}
	svc := chargeback.New(ch, nil, clockAt(t, to))
	by, err := chargeback.ParseGroupBy("version,team,endpoint")
	if err != nil {
		t.Fatal(err)
	}
	rep, err := svc.Report(t.Context(), finance, chargeback.Query{From: from, To: to, GroupBy: by})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := chargeback.WriteCSV(&buf, rep); err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "report.csv")
	if *update {
		if err := os.WriteFile(golden, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if got := buf.String(); got != string(want) {
		t.Fatalf("CSV differs from %s:\n got:\n%s\nwant:\n%s", golden, got, want)
	}
	if !strings.HasPrefix(buf.String(), "# modelplane chargeback; period 2026-10-01T00:00:00Z to 2026-10-01T01:30:00Z") {
		t.Fatalf("CSV lacks its period comment: %q", strings.SplitN(buf.String(), "\n", 2)[0])
	}
}

func TestParseGroupBy(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in      string
		want    string
		wantErr bool
	}{
		{"", "", false},
		{"allocation,team", "team,allocation", false},
		{"version, endpoint ,version", "endpoint,version", false},
		{"team,region", "", true},
	} {
		got, err := chargeback.ParseGroupBy(tc.in)
		if (err != nil) != tc.wantErr {
			t.Errorf("ParseGroupBy(%q) err = %v, want error %v", tc.in, err, tc.wantErr)
			continue
		}
		var s []string
		for _, d := range got {
			s = append(s, string(d))
		}
		if strings.Join(s, ",") != tc.want {
			t.Errorf("ParseGroupBy(%q) = %v, want %s", tc.in, got, tc.want)
		}
	}
}

// TestAllocate checks the largest-remainder rule on hand-made numerators.
func TestAllocate(t *testing.T) {
	t.Parallel()
	// 1.5 + 1.5 + 1.5 µUSD: the total rounds 4.5 up to 5; the first two
	// rows (ties go to the earlier) get 2, the last 1.
	rows := []chargeback.Row{{CostX3600: 5400}, {CostX3600: 5400}, {CostX3600: 5400}}
	if total := chargeback.Allocate(16200, rows); total != 5 {
		t.Fatalf("total = %d, want 5", total)
	}
	for i, want := range []int64{2, 2, 1} {
		if rows[i].CostMicroUSD != want {
			t.Errorf("row %d = %d, want %d", i, rows[i].CostMicroUSD, want)
		}
	}
}

// TestPerUnitCostsOfLargeGroups: cost per million tokens and per thousand
// requests stay exact (rounded half up) for groups whose cost times the
// scale passes int64 ($10M times a million micro-USD wraps a 64-bit
// product); a quotient beyond int64 saturates rather than wrapping.
func TestPerUnitCostsOfLargeGroups(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name           string
		row            chargeback.Row
		perM, per1k    int64
		perMOK, per1kK bool
	}{
		{"small", chargeback.Row{CostMicroUSD: 3, Tokens: 2, TokensKnown: true, Requests: 2000}, 1_500_000, 2, true, true},
		// $10M over 7 billion tokens: 1e13 * 1e6 / 7e9 = 1,428,571,428.57 → 1,428,571,429.
		{"$10M", chargeback.Row{CostMicroUSD: 10_000_000_000_000, Tokens: 7_000_000_000, TokensKnown: true, Requests: 3},
			1_428_571_429, 3_333_333_333_333_333, true, true},
		// Half rounds up: (9e18 + 1) * 1e6 / 2e6 ends in .5 and rounds to ...001.
		{"half up", chargeback.Row{CostMicroUSD: 9_000_000_000_000_001, Tokens: 2_000_000, TokensKnown: true, Requests: 2_000},
			4_500_000_000_000_001, 4_500_000_000_000_001, true, true},
		{"beyond int64", chargeback.Row{CostMicroUSD: 9_000_000_000_000_000_000, Tokens: 1, TokensKnown: true, Requests: 1},
			math.MaxInt64, math.MaxInt64, true, true},
		{"no tokens", chargeback.Row{CostMicroUSD: 5, Requests: 0}, 0, 0, false, false},
	} {
		perM, ok := tc.row.CostPer1MTokensMicroUSD()
		if perM != tc.perM || ok != tc.perMOK {
			t.Errorf("%s: CostPer1MTokensMicroUSD = %d, %v; want %d, %v", tc.name, perM, ok, tc.perM, tc.perMOK)
		}
		per1k, ok := tc.row.CostPer1kRequestsMicroUSD()
		if per1k != tc.per1k || ok != tc.per1kK {
			t.Errorf("%s: CostPer1kRequestsMicroUSD = %d, %v; want %d, %v", tc.name, per1k, ok, tc.per1k, tc.per1kK)
		}
	}
}
