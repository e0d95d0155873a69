package chargeback_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"modelplane/busapi"
	"modelplane/chargeback"
	"modelplane/ingest"
	"modelplane/internal/chtest"
)

// statsWindows are n gateway windows, at millisecond times in [from, to)
// (one in four on an hour or just before one), of the fleetUsage
// endpoints: tokens on every one, calls from a granted team and from two
// versions of a graph among them.
func statsWindows(rng *rand.Rand, from, to time.Time, n int, tag string) []busapi.ReqStats {
	owners := map[string]string{"fraud": "risk", "score": "risk", "rank": "search", "chat": "search", "embed": "search"}
	endpoints := []string{"fraud", "score", "rank", "chat", "embed"}
	zero := make([]uint64, busapi.LatencyBuckets)
	out := make([]busapi.ReqStats, 0, n)
	for i := range n {
		at := from.Add(time.Duration(rng.Int64N(int64(to.Sub(from)/time.Millisecond))) * time.Millisecond)
		switch i % 8 {
		case 0:
			at = at.Truncate(time.Hour)
		case 1:
			at = at.Truncate(time.Hour).Add(-time.Millisecond)
		}
		if at.Before(from) {
			at = from
		}
		ep := endpoints[rng.IntN(len(endpoints))]
		caller, graph, gv := "", "", ""
		switch rng.IntN(4) {
		case 0:
			caller = map[string]string{"risk": "search", "search": "risk"}[owners[ep]]
		case 1:
			caller, graph, gv = "search", "pipeline", []string{"g1", "g2"}[rng.IntN(2)]
		}
		requests := uint64(1 + rng.IntN(300))
		lat := make([]uint64, busapi.LatencyBuckets)
		lat[0] = requests
		s := busapi.ReqStats{WindowStart: at.UnixMilli(), WindowEnd: at.Add(5 * time.Second).UnixMilli(), Gateway: "gw", Endpoint: ep,
			Team: owners[ep], Version: map[string]string{"fraud": "v1", "score": "v7", "rank": "v1", "chat": "v3", "embed": "v1"}[ep],
			Count: requests, Latency: lat, TTFT: zero, TPOT: zero, Tokens: uint64(rng.IntN(5000)), CallerTeam: caller,
			ViaGraph: graph, ViaGraphVersion: gv}
		s.ID = fmt.Sprintf("%s-%d", tag, i)
		out = append(out, s)
	}
	return out
}

// exactPart is rep with its utilisation sums, which are floating-point
// and summed in another order from the rollups, checked against other's
// (relative error under 1e-9) and cleared: everything left is integers
// and names, compared exactly.
func exactPart(t *testing.T, rep, other *chargeback.Report) chargeback.Report {
	t.Helper()
	near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }
	out := *rep
	out.Rows = slices.Clone(rep.Rows)
	for i := range out.Rows {
		if i < len(other.Rows) && (!near(out.Rows[i].UtilPctSum, other.Rows[i].UtilPctSum) || !near(out.Rows[i].CPUUtilPctSum, other.Rows[i].CPUUtilPctSum)) {
			t.Errorf("row %+v: utilisation %v, other %v", out.Rows[i].Key, out.Rows[i].UtilPctSum, other.Rows[i].UtilPctSum)
		}
		out.Rows[i].UtilPctSum, out.Rows[i].CPUUtilPctSum = 0, 0
	}
	out.Total.UtilPctSum, out.Total.CPUUtilPctSum = 0, 0
	return out
}

func storeStats(t *testing.T, ch driver.Conn, stats []busapi.ReqStats) {
	t.Helper()
	if err := ingest.StoreReqStats(t.Context(), ch, stats); err != nil {
		t.Fatal(err)
	}
}

// TestPreAggregatedReportEqualsRawRows: a report read from the rollups
// (usage hours and request statistics hours, raw rows at the partial hours
// around them) equals, row for row and to the micro-dollar, the same
// report read from the raw rows alone, for the groupings that carry
// tokens and those that split an endpoint's cost among caller teams,
// graphs and graph versions by their requests and tokens per hour, over
// periods that start and end inside hours and on them, before and after
// late statistics windows arrive for hours already aggregated and a
// redelivered set of windows is stored again.
func TestPreAggregatedReportEqualsRawRows(t *testing.T) {
	t.Parallel()
	ch := chtest.New(t)
	from, to := t0.Add(50*time.Minute), t0.Add(3*time.Hour+10*time.Minute)
	insert(t, ch, fleetUsage(from, to))
	rng := rand.New(rand.NewPCG(31, 3))
	first := statsWindows(rng, from, to, 2000, "first")
	storeStats(t, ch, first)
	svc := chargeback.New(ch, nil, clockAt(t, to))
	groupings := [][]chargeback.Dimension{
		nil,
		{chargeback.DimTeam},
		{chargeback.DimEndpoint},
		{chargeback.DimTeam, chargeback.DimEndpoint, chargeback.DimVersion},
		{chargeback.DimModel},
		{chargeback.DimGPUType, chargeback.DimAllocation},
		{chargeback.DimCallerTeam},
		{chargeback.DimTeam, chargeback.DimEndpoint, chargeback.DimCallerTeam},
		{chargeback.DimGraph},
		{chargeback.DimEndpoint, chargeback.DimGraph, chargeback.DimGraphVersion},
	}
	periods := []struct{ from, to time.Time }{
		{from, to},
		{t0.Add(time.Hour), t0.Add(3 * time.Hour)},
		{t0.Add(61 * time.Minute), t0.Add(62 * time.Minute)},
		{t0.Add(59*time.Minute + 59*time.Second), t0.Add(2*time.Hour + time.Second)},
	}
	compare := func(when string) {
		t.Helper()
		for _, p := range periods {
			for _, by := range groupings {
				q := chargeback.Query{From: p.from, To: p.to, GroupBy: by}
				agg, err := svc.Report(t.Context(), finance, q)
				if err != nil {
					t.Fatal(err)
				}
				q.Source = chargeback.SourceRaw
				raw, err := svc.Report(t.Context(), finance, q)
				if err != nil {
					t.Fatal(err)
				}
				tokens := int64(0)
				for _, r := range raw.Rows {
					tokens += r.Tokens
				}
				if len(raw.Rows) == 0 || !reflect.DeepEqual(exactPart(t, agg, raw), exactPart(t, raw, agg)) {
					t.Errorf("%s: %s–%s by %v: rollups\n%+v\nraw rows\n%+v", when, p.from.Format(time.TimeOnly), p.to.Format(time.TimeOnly), by, agg, raw)
				}
				if reflect.DeepEqual(by, groupings[3]) && tokens == 0 {
					t.Errorf("%s: %s–%s by %v: no tokens counted; the comparison says nothing of them", when, p.from, p.to, by)
				}
			}
		}
	}
	compare("first")
	// Late windows in hours already read, and the first set redelivered:
	// ingest skips what it stored, so neither the raw rows nor the views
	// count a window twice.
	storeStats(t, ch, statsWindows(rng, from, to, 500, "late"))
	storeStats(t, ch, first)
	compare("after late and redelivered windows")
}
