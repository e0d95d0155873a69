package gateway_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"modelplane/auth"
	"modelplane/busapi"
	"modelplane/chargeback"
	"modelplane/demo/fraud"
	"modelplane/gateway"
	"modelplane/ingest"
	"modelplane/internal/chtest"
	"modelplane/internal/wait"
)

// TestGraphCostIsItsStepsShares sends requests through the real gateway to
// risk's graph (an ensemble over the demo's real xgb and onnx fraud
// models), to search's graph over risk's xgb granted to search, and
// directly to xgb; the statistics go through NATS and the ingest consumer
// into ClickHouse, beside an hour of the two endpoints' GPU usage.
// Chargeback then charges each graph, marked on its steps' series, its
// share of each step endpoint (doc-flow all of onnx's cost and 3 of xgb's
// 10 requests, search-flow 2 of them, charged to search as caller team),
// a graph's cost is the sum of those shares, and each step endpoint's
// parts add up exactly to its own unchanged cost.
func TestGraphCostIsItsStepsShares(t *testing.T) {
	t.Parallel()
	clk := newClock(t)
	ge := newGraphEnv(t, gateway.Config{Clock: clk, ID: "gw-cost"})
	def := `{"entry":"ens","nodes":[
	 {"id":"ens","type":"ensemble","steps":["x","o"],"combine":"mean"},
	 {"id":"x","type":"call","endpoint":"xgb"},{"id":"o","type":"call","endpoint":"onnx"}]}`
	ge.put(t, graphRoute("doc-flow", "risk", 1, graphVer("g1", 100, def)))
	// risk grants xgb to search, whose own graph calls it.
	xgbRoute := route("xgb", "risk", "classification", 2, ver("v23", 100, ge.xgb))
	xgbRoute.InputSchema, xgbRoute.Grants = fraud.InputSchema(), []busapi.RouteGrant{{Team: "search"}}
	ge.put(t, xgbRoute)
	ge.put(t, graphRoute("search-flow", "search", 1, graphVer("s1", 100, `{"entry":"x","nodes":[{"id":"x","type":"call","endpoint":"xgb"}]}`)))
	searchKey := ge.newKey(t, "search", "viewer", nil)
	authenticates(t, ge.g, searchKey)
	const viaGraph, viaSearch, direct = 3, 2, 5
	for range viaSearch {
		if r := call(t, ge.g.url, predictPath("search-flow"), searchKey, payments); r.status != 200 {
			t.Fatalf("search's graph answered %d %s", r.status, r.body)
		}
	}
	for range viaGraph {
		if r := ge.predict(t, "doc-flow", payments); r.status != 200 {
			t.Fatalf("graph answered %d %s", r.status, r.body)
		}
	}
	for range direct {
		if r := ge.predict(t, "xgb", payments); r.status != 200 {
			t.Fatalf("xgb answered %d %s", r.status, r.body)
		}
	}
	// The graphs' own requests, their steps, and the direct calls.
	const total = viaGraph + 2*viaGraph + 2*viaSearch + direct
	wait.Eventually(t, 10*time.Second, func() bool { return ge.g.Stats().Pending == total }, "waiting for %d requests counted", total)
	windowStart := clk.Now().UTC()
	advance(t, clk, gateway.DefaultStatsInterval)
	wait.Eventually(t, 10*time.Second, func() bool { return ge.g.Stats().PublishedRequests == total }, "waiting for the statistics published")

	js, err := jetstream.New(ge.nc)
	if err != nil {
		t.Fatal(err)
	}
	ch := chtest.New(t)
	c, err := ingest.NewReqStats(ingest.ReqStatsConfig{JS: js, CH: ch, MaxWait: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	wait.Eventually(t, 30*time.Second, func() bool {
		var n uint64
		err := ch.QueryRow(t.Context(), "SELECT sum(requests) FROM request_stats").Scan(&n)
		return err == nil && n == total
	}, "waiting for request_stats to hold %d requests", total)
	var marked uint64
	if err := ch.QueryRow(t.Context(), "SELECT sum(requests) FROM request_stats WHERE via_graph = 'doc-flow' AND via_graph_version = 'g1'").Scan(&marked); err != nil || marked != 2*viaGraph {
		t.Fatalf("steps marked with doc-flow g1: %d (%v), want %d", marked, err, 2*viaGraph)
	}

	// An hour of usage of the two step endpoints around the window.
	hour := windowStart.Truncate(time.Hour)
	b, err := ch.PrepareBatch(t.Context(), "INSERT INTO gpu_usage (ts, node, gpu, slice, gpu_type, profile, team, endpoint, model, version, replica, "+
		"util_pct, memory_mb, requests, rate_uusd_per_hour, batch_id, row_idx)")
	if err != nil {
		t.Fatal(err)
	}
	rates := map[string]uint64{"xgb": 3_500_001, "onnx": 1_200_007}
	i := uint32(0)
	for s := hour; s.Before(hour.Add(time.Hour)); s = s.Add(time.Second) {
		for gpu, ep := range []string{"xgb", "onnx"} {
			if err := b.Append(s, "n1", uint16(gpu), uint16(0), "A100-80GB", "full", "risk", ep, "fraud", "v1", ep+"-v1-0",
				float32(50), uint64(1000), uint64(0), rates[ep], "graph-cost", i); err != nil {
				t.Fatal(err)
			}
			i++
		}
	}
	if err := b.Send(); err != nil {
		t.Fatal(err)
	}

	fin := &auth.Principal{Name: "fin@example.com", PlatformRole: auth.RoleFinance}
	at := newClock(t)
	at.Set(hour.Add(3 * time.Hour))
	svc := chargeback.New(ch, nil, at)
	q := func(graph string, by ...chargeback.Dimension) *chargeback.Report {
		t.Helper()
		rep, err := svc.Report(t.Context(), fin, chargeback.Query{From: hour, To: hour.Add(time.Hour), GroupBy: by, Graph: graph})
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
	owners := q("", chargeback.DimEndpoint)
	steps := q("", chargeback.DimEndpoint, chargeback.DimGraph)
	graphs := q("", chargeback.DimGraph)
	byStep := q("doc-flow", chargeback.DimEndpoint)

	cost := map[string]int64{}
	for _, r := range owners.Rows {
		cost[r.Endpoint] = r.CostX3600
	}
	xgbCost, onnxCost := int64(3600*rates["xgb"]), int64(3600*rates["onnx"])
	if cost["xgb"] != xgbCost || cost["onnx"] != onnxCost {
		t.Fatalf("step endpoints cost %v, want xgb %d and onnx %d (µUSD×3600)", cost, xgbCost, onnxCost)
	}
	parts := map[string]int64{}
	sums := map[string]int64{}
	for _, r := range steps.Rows {
		parts[r.Endpoint+"/"+r.Graph] = r.CostX3600
		sums[r.Endpoint] += r.CostX3600
	}
	xgbCalls := int64(viaGraph + viaSearch + direct)
	wantXgb, wantSearch := xgbCost*viaGraph/xgbCalls, xgbCost*viaSearch/xgbCalls
	if parts["xgb/doc-flow"] != wantXgb || parts["onnx/doc-flow"] != onnxCost || parts["xgb/search-flow"] != wantSearch {
		t.Errorf("graphs' shares %v; want doc-flow xgb %d (3 of 10 requests) and all of onnx %d, search-flow xgb %d (2 of 10)",
			parts, wantXgb, onnxCost, wantSearch)
	}
	if parts["xgb/"] != xgbCost-wantXgb-wantSearch {
		t.Errorf("risk keeps %d of xgb, want the rest %d", parts["xgb/"], xgbCost-wantXgb-wantSearch)
	}
	// search-flow's share is search's, as caller team.
	if rows := q("search-flow", chargeback.DimCallerTeam).Rows; len(rows) != 1 || rows[0].CallerTeam != "search" || rows[0].CostX3600 != wantSearch {
		t.Errorf("search-flow's share by caller team %+v; want one row, search's %d", rows, wantSearch)
	}
	for ep, c := range cost {
		if sums[ep] != c {
			t.Errorf("%s's shares and remainder add up to %d, its cost is %d", ep, sums[ep], c)
		}
	}
	var graphRow chargeback.Row
	for _, r := range graphs.Rows {
		if r.Graph == "doc-flow" {
			graphRow = r
		}
	}
	if graphRow.CostX3600 != wantXgb+onnxCost {
		t.Errorf("doc-flow costs %d, the sum of its steps' shares is %d", graphRow.CostX3600, wantXgb+onnxCost)
	}
	var seen []string
	var sum int64
	for _, r := range byStep.Rows {
		seen = append(seen, r.Endpoint)
		sum += r.CostMicroUSD
	}
	if fmt.Sprint(seen) != "[onnx xgb]" || sum != byStep.Total.CostMicroUSD || byStep.Total.CostMicroUSD != graphRow.CostMicroUSD {
		t.Errorf("doc-flow by step %v adding to %d µUSD, total %d, its row in the report by graph %d",
			seen, sum, byStep.Total.CostMicroUSD, graphRow.CostMicroUSD)
	}
	if graphs.Total.CostMicroUSD != owners.Total.CostMicroUSD {
		t.Errorf("by graph the total is %d µUSD, by endpoint %d", graphs.Total.CostMicroUSD, owners.Total.CostMicroUSD)
	}
}
