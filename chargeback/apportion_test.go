package chargeback_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"modelplane/auth"
	"modelplane/busapi"
	"modelplane/chargeback"
	"modelplane/ingest"
	"modelplane/internal/chtest"
	"modelplane/money"
)

// calls stores one gateway window of requests (and tokens) of endpoint,
// owned by team, by caller ("" the owners' own) at at.
func calls(t *testing.T, ch driver.Conn, at time.Time, team, endpoint, caller string, requests, tokens uint64) {
	t.Helper()
	graphCalls(t, ch, at, team, endpoint, caller, "", requests, tokens)
}

// graphCalls is calls made as the steps of graph endpoint graph ("" none),
// version g1, as the gateway marks them.
func graphCalls(t *testing.T, ch driver.Conn, at time.Time, team, endpoint, caller, graph string, requests, tokens uint64) {
	t.Helper()
	gv := ""
	if graph != "" {
		gv = "g1"
	}
	graphVersionCalls(t, ch, at, team, endpoint, caller, graph, gv, requests, tokens)
}

// graphVersionCalls is graphCalls by version gv of the graph.
func graphVersionCalls(t *testing.T, ch driver.Conn, at time.Time, team, endpoint, caller, graph, gv string, requests, tokens uint64) {
	t.Helper()
	zero := make([]uint64, busapi.LatencyBuckets)
	lat := make([]uint64, busapi.LatencyBuckets)
	lat[0] = requests
	s := busapi.ReqStats{ID: fmt.Sprintf("gw/%s/v1/%d/%s/%s@%s", endpoint, at.UnixMilli(), caller, graph, gv), WindowStart: at.UnixMilli(),
		WindowEnd: at.Add(5 * time.Second).UnixMilli(), Gateway: "gw", Endpoint: endpoint, Team: team, Version: "v1",
		Count: requests, Latency: lat, TTFT: zero, TPOT: zero, Tokens: tokens, CallerTeam: caller,
		ViaGraph: graph, ViaGraphVersion: gv}
	if err := ingest.StoreReqStats(t.Context(), ch, []busapi.ReqStats{s}); err != nil {
		t.Fatal(err)
	}
}

// TestChargebackByCallerTeamAddsUpToOwnersCost: an endpoint's cost split by
// caller team (requests per hour; tokens for an endpoint that counted
// them) gives each granted team its share rounded down in exact integers
// and the owners the rest, so the rows add up to the cent — to the
// micro-dollar — to what the owners' own report charges; a consumer sees
// only its share, the owners see every caller.
func TestChargebackByCallerTeamAddsUpToOwnersCost(t *testing.T) {
	t.Parallel()
	ch := chtest.New(t)
	from, to := t0.Add(30*time.Minute), t0.Add(2*time.Hour+10*time.Minute)
	var rows []rec
	for s := from; s.Before(to); s = s.Add(time.Second) {
		rows = append(rows,
			rec{ts: s, node: "n1", gpu: 0, gpuType: "A100-80GB", profile: "full", team: "risk", endpoint: "fraud", model: "fraud-model", ver: "v1", rate: 3_500_001, requests: 1},
			rec{ts: s, node: "n1", gpu: 1, gpuType: "A100-80GB", profile: "full", team: "risk", endpoint: "chat", model: "chat-model", ver: "v1", rate: 5_500_011})
	}
	insert(t, ch, rows)
	// fraud: hour 0 risk 100, search 37, ads 13; hour 1 search 5 only;
	// hour 2 nobody but risk. chat counts tokens: search 3 of 10.
	calls(t, ch, t0.Add(40*time.Minute), "risk", "fraud", "", 100, 0)
	calls(t, ch, t0.Add(41*time.Minute), "risk", "fraud", "search", 37, 0)
	calls(t, ch, t0.Add(42*time.Minute), "risk", "fraud", "ads", 13, 0)
	calls(t, ch, t0.Add(70*time.Minute), "risk", "fraud", "search", 5, 0)
	calls(t, ch, t0.Add(125*time.Minute), "risk", "fraud", "", 9, 0)
	calls(t, ch, t0.Add(50*time.Minute), "risk", "chat", "", 50, 7)
	calls(t, ch, t0.Add(51*time.Minute), "risk", "chat", "search", 900, 3)

	svc := chargeback.New(ch, nil, clockAt(t, to.Add(time.Hour)))
	ctx := t.Context()
	for _, src := range []chargeback.Source{chargeback.SourceAuto, chargeback.SourceRaw} {
		owners, err := svc.Report(ctx, finance, chargeback.Query{From: from, To: to, GroupBy: []chargeback.Dimension{chargeback.DimEndpoint}, Source: src})
		if err != nil {
			t.Fatal(err)
		}
		split, err := svc.Report(ctx, finance, chargeback.Query{From: from, To: to, Source: src,
			GroupBy: []chargeback.Dimension{chargeback.DimEndpoint, chargeback.DimCallerTeam}})
		if err != nil {
			t.Fatal(err)
		}
		if split.Total.CostMicroUSD != owners.Total.CostMicroUSD || split.Total.CostX3600 != owners.Total.CostX3600 {
			t.Fatalf("source %d: split total %d (x3600 %d), owners' total %d (x3600 %d)", src,
				split.Total.CostMicroUSD, split.Total.CostX3600, owners.Total.CostMicroUSD, owners.Total.CostX3600)
		}
		perEndpoint := map[string]int64{}
		got := map[string]chargeback.Row{}
		for _, r := range split.Rows {
			perEndpoint[r.Endpoint] += r.CostMicroUSD
			got[r.Endpoint+"/"+r.CallerTeam] = r
		}
		for _, o := range owners.Rows {
			// Each endpoint's parts add up to its owners' cost: exact to
			// the micro-dollar, as money prints it.
			if money.USD(perEndpoint[o.Endpoint]) != money.USD(o.CostMicroUSD) {
				t.Errorf("source %d: %s parts add up to %s, owners' cost %s", src, o.Endpoint, money.USD(perEndpoint[o.Endpoint]), money.USD(o.CostMicroUSD))
			}
		}
		// fraud costs 3,500,001 µUSD × 3600 per hour of seconds: hour 0
		// has 1,800 s (from :30), hour 1 3,600 s, hour 2 600 s.
		h0, h1 := int64(1800*3_500_001), int64(3600*3_500_001)
		wantSearch := h0*37/150 + h1 // hour 1 is all search's
		wantAds := h0 * 13 / 150
		if g := got["fraud/search"].CostX3600; g != wantSearch {
			t.Errorf("source %d: search's share of fraud = %d µUSD×3600, want %d", src, g, wantSearch)
		}
		if g := got["fraud/ads"].CostX3600; g != wantAds {
			t.Errorf("source %d: ads' share of fraud = %d µUSD×3600, want %d", src, g, wantAds)
		}
		var fraud int64
		for _, o := range owners.Rows {
			if o.Endpoint == "fraud" {
				fraud = o.CostX3600
			}
		}
		if g := got["fraud/risk"].CostX3600; g != fraud-wantSearch-wantAds {
			t.Errorf("source %d: risk keeps %d of fraud, want the rest %d", src, g, fraud-wantSearch-wantAds)
		}
		// chat counted tokens: search pays 3 of 10 tokens, not 900 of 950 requests.
		chatH0 := int64(1800 * 5_500_011)
		if g := got["chat/search"].CostX3600; g != chatH0*3/10 {
			t.Errorf("source %d: search's share of chat = %d, want %d (by tokens)", src, g, chatH0*3/10)
		}
	}

	// search's engineers see their share of risk's fraud model and nothing
	// else of risk's; risk's see every caller of theirs.
	searchEng := &auth.Principal{Name: "s@example.com", Teams: []auth.Membership{{TeamID: 2, Team: "search", Role: auth.RoleEngineer}}}
	rep, err := svc.Report(ctx, searchEng, chargeback.Query{From: from, To: to, GroupBy: []chargeback.Dimension{chargeback.DimTeam, chargeback.DimEndpoint, chargeback.DimCallerTeam}})
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	for _, r := range rep.Rows {
		seen = append(seen, r.Team+"/"+r.Endpoint+"/"+r.CallerTeam)
	}
	if fmt.Sprint(seen) != "[risk/chat/search risk/fraud/search]" {
		t.Errorf("search sees %v, want only its shares of risk's chat and fraud", seen)
	}
	// search's report reads only its own endpoints' usage and that of the
	// endpoints it called, yet its rows are finance's (which read every
	// team's) to the micro-dollar.
	all, err := svc.Report(ctx, finance, chargeback.Query{From: from, To: to, GroupBy: []chargeback.Dimension{chargeback.DimTeam, chargeback.DimEndpoint, chargeback.DimCallerTeam}})
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, r := range all.Rows {
		if r.Team == "search" || r.CallerTeam == "search" {
			want = append(want, fmt.Sprintf("%s/%s/%s %d", r.Team, r.Endpoint, r.CallerTeam, r.CostX3600))
		}
	}
	seen = nil
	for _, r := range rep.Rows {
		seen = append(seen, fmt.Sprintf("%s/%s/%s %d", r.Team, r.Endpoint, r.CallerTeam, r.CostX3600))
	}
	if fmt.Sprint(seen) != fmt.Sprint(want) {
		t.Errorf("search's rows %v, want finance's rows of search %v", seen, want)
	}
	rep, err = svc.Report(ctx, riskEng, chargeback.Query{From: from, To: to, GroupBy: []chargeback.Dimension{chargeback.DimEndpoint, chargeback.DimCallerTeam}, Endpoint: "fraud"})
	if err != nil {
		t.Fatal(err)
	}
	seen = nil
	for _, r := range rep.Rows {
		seen = append(seen, r.CallerTeam)
	}
	if fmt.Sprint(seen) != "[ads risk search]" {
		t.Errorf("risk sees callers %v of fraud, want [ads risk search]", seen)
	}
}

// TestChargebackByGraphIsTheSumOfItsSteps: a graph is charged, in each
// hour, each step endpoint's cost times its steps' share of that
// endpoint's requests (tokens for an endpoint that counted them), rounded
// down in exact integers: risk's own graph over its fraud and chat
// endpoints, and search's graph over risk's fraud through a grant (the
// graph's team is its steps' caller team). A report by graph charges the
// graph the sum of its steps' shares, the per-step breakdown adds up to
// it, each step endpoint's parts (graphs, direct callers, the owners'
// rest) add up exactly to its cost, and the caller_team split is
// unchanged by the graphs' marks.
func TestChargebackByGraphIsTheSumOfItsSteps(t *testing.T) {
	t.Parallel()
	ch := chtest.New(t)
	from, to := t0.Add(30*time.Minute), t0.Add(2*time.Hour)
	var rows []rec
	for s := from; s.Before(to); s = s.Add(time.Second) {
		rows = append(rows,
			rec{ts: s, node: "n1", gpu: 0, gpuType: "A100-80GB", profile: "full", team: "risk", endpoint: "fraud", model: "fraud-model", ver: "v1", rate: 3_500_001, requests: 1},
			rec{ts: s, node: "n1", gpu: 1, gpuType: "A100-80GB", profile: "full", team: "risk", endpoint: "chat", model: "chat-model", ver: "v1", rate: 5_500_011})
	}
	insert(t, ch, rows)
	// Hour 0: fraud 60 direct by risk, 30 by risk's doc-flow, 7 by
	// search directly, 3 by search's search-flow; chat 10 tokens of which
	// doc-flow 4. Hour 1: fraud 1 by doc-flow, 2 by risk directly.
	calls(t, ch, t0.Add(40*time.Minute), "risk", "fraud", "", 60, 0)
	graphCalls(t, ch, t0.Add(41*time.Minute), "risk", "fraud", "", "doc-flow", 30, 0)
	calls(t, ch, t0.Add(42*time.Minute), "risk", "fraud", "search", 7, 0)
	graphCalls(t, ch, t0.Add(43*time.Minute), "risk", "fraud", "search", "search-flow", 3, 0)
	calls(t, ch, t0.Add(44*time.Minute), "risk", "chat", "", 50, 6)
	graphCalls(t, ch, t0.Add(45*time.Minute), "risk", "chat", "", "doc-flow", 2, 4)
	graphCalls(t, ch, t0.Add(70*time.Minute), "risk", "fraud", "", "doc-flow", 1, 0)
	calls(t, ch, t0.Add(71*time.Minute), "risk", "fraud", "", 2, 0)

	svc := chargeback.New(ch, nil, clockAt(t, to.Add(time.Hour)))
	ctx := t.Context()
	by := func(d ...chargeback.Dimension) []chargeback.Dimension { return d }
	fraudH0, fraudH1, chatH0 := int64(1800*3_500_001), int64(3600*3_500_001), int64(1800*5_500_011)
	want := map[string]int64{ // µUSD × 3600, by hand
		"doc-flow/fraud":    fraudH0*30/100 + fraudH1*1/3,
		"doc-flow/chat":     chatH0 * 4 / 10,
		"search-flow/fraud": fraudH0 * 3 / 100,
	}
	for _, src := range []chargeback.Source{chargeback.SourceAuto, chargeback.SourceRaw} {
		owners, err := svc.Report(ctx, finance, chargeback.Query{From: from, To: to, GroupBy: by(chargeback.DimEndpoint), Source: src})
		if err != nil {
			t.Fatal(err)
		}
		steps, err := svc.Report(ctx, finance, chargeback.Query{From: from, To: to, GroupBy: by(chargeback.DimEndpoint, chargeback.DimGraph), Source: src})
		if err != nil {
			t.Fatal(err)
		}
		graphs, err := svc.Report(ctx, finance, chargeback.Query{From: from, To: to, GroupBy: by(chargeback.DimGraph), Source: src})
		if err != nil {
			t.Fatal(err)
		}
		if steps.Total.CostX3600 != owners.Total.CostX3600 || graphs.Total.CostMicroUSD != owners.Total.CostMicroUSD {
			t.Fatalf("source %d: totals %d and %d µUSD, owners' %d", src, steps.Total.CostMicroUSD, graphs.Total.CostMicroUSD, owners.Total.CostMicroUSD)
		}
		got := map[string]int64{}
		perEndpoint := map[string]int64{}
		for _, r := range steps.Rows {
			got[r.Graph+"/"+r.Endpoint] += r.CostX3600
			perEndpoint[r.Endpoint] += r.CostX3600
		}
		for k, w := range want {
			if got[k] != w {
				t.Errorf("source %d: %s = %d µUSD×3600, want %d", src, k, got[k], w)
			}
		}
		// Shares and the rest add up exactly to each step endpoint's cost.
		for _, o := range owners.Rows {
			if perEndpoint[o.Endpoint] != o.CostX3600 {
				t.Errorf("source %d: %s's parts add up to %d, its cost is %d", src, o.Endpoint, perEndpoint[o.Endpoint], o.CostX3600)
			}
		}
		// A graph's cost is the sum of its steps' shares.
		for _, g := range graphs.Rows {
			if g.Graph == "" {
				continue
			}
			if s := got[g.Graph+"/fraud"] + got[g.Graph+"/chat"]; g.CostX3600 != s {
				t.Errorf("source %d: graph %s costs %d, its steps %d", src, g.Graph, g.CostX3600, s)
			}
		}
		// One graph's breakdown: its steps alone, adding up in micro-USD.
		one, err := svc.Report(ctx, finance, chargeback.Query{From: from, To: to, GroupBy: by(chargeback.DimEndpoint), Graph: "doc-flow", Source: src})
		if err != nil {
			t.Fatal(err)
		}
		var sum int64
		var names []string
		for _, r := range one.Rows {
			sum += r.CostMicroUSD
			names = append(names, r.Endpoint)
		}
		if fmt.Sprint(names) != "[chat fraud]" || sum != one.Total.CostMicroUSD ||
			one.Total.CostX3600 != want["doc-flow/fraud"]+want["doc-flow/chat"] {
			t.Errorf("source %d: doc-flow by step %v adding to %d of %d (x3600 %d)", src, names, sum, one.Total.CostMicroUSD, one.Total.CostX3600)
		}
	}

	// search's engineers see their graph's share and their direct calls'
	// share of risk's fraud, nothing of risk's own graph.
	searchEng := &auth.Principal{Name: "s@example.com", Teams: []auth.Membership{{TeamID: 2, Team: "search", Role: auth.RoleEngineer}}}
	rep, err := svc.Report(ctx, searchEng, chargeback.Query{From: from, To: to, GroupBy: by(chargeback.DimEndpoint, chargeback.DimCallerTeam, chargeback.DimGraph)})
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	for _, r := range rep.Rows {
		seen = append(seen, r.Endpoint+"/"+r.CallerTeam+"/"+r.Graph)
	}
	if fmt.Sprint(seen) != "[fraud/search/ fraud/search/search-flow]" {
		t.Errorf("search sees %v", seen)
	}
	// Grouped by caller team alone, search pays for its direct calls and
	// its graph's together, as before graphs were marked.
	rep, err = svc.Report(ctx, finance, chargeback.Query{From: from, To: to, GroupBy: by(chargeback.DimEndpoint, chargeback.DimCallerTeam), Endpoint: "fraud"})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rep.Rows {
		if r.CallerTeam == "search" && r.CostX3600 != fraudH0*10/100 {
			t.Errorf("search's share of fraud by caller team %d, want %d", r.CostX3600, fraudH0*10/100)
		}
	}
}

// TestChargebackByGraphVersion: grouped by graph_version, a graph's share
// of each step endpoint is split by the graph version whose steps made the
// calls (the incumbent's and a canary's), in exact integers; the versions
// add up to the graph's row, and the report's total is unchanged.
func TestChargebackByGraphVersion(t *testing.T) {
	t.Parallel()
	ch := chtest.New(t)
	from, to := t0, t0.Add(time.Hour)
	var rows []rec
	for s := from; s.Before(to); s = s.Add(time.Second) {
		rows = append(rows, rec{ts: s, node: "n1", gpu: 0, gpuType: "A100-80GB", profile: "full", team: "risk", endpoint: "fraud", model: "fraud-model", ver: "v1", rate: 3_500_001, requests: 1})
	}
	insert(t, ch, rows)
	// fraud: 60 direct, 30 by doc-flow g1, 7 by doc-flow g2 (its canary),
	// 3 by search-flow g1.
	calls(t, ch, t0.Add(10*time.Minute), "risk", "fraud", "", 60, 0)
	graphVersionCalls(t, ch, t0.Add(11*time.Minute), "risk", "fraud", "", "doc-flow", "g1", 30, 0)
	graphVersionCalls(t, ch, t0.Add(12*time.Minute), "risk", "fraud", "", "doc-flow", "g2", 7, 0)
	graphVersionCalls(t, ch, t0.Add(13*time.Minute), "risk", "fraud", "", "search-flow", "g1", 3, 0)

	svc := chargeback.New(ch, nil, clockAt(t, to.Add(time.Hour)))
	by, err := chargeback.ParseGroupBy("graph_version")
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(by) != "[graph graph_version]" {
		t.Fatalf("group_by graph_version parses to %v, want [graph graph_version]", by)
	}
	fraud := int64(3600 * 3_500_001)
	want := map[string]int64{"/": fraud - fraud*30/100 - fraud*7/100 - fraud*3/100,
		"doc-flow/g1": fraud * 30 / 100, "doc-flow/g2": fraud * 7 / 100, "search-flow/g1": fraud * 3 / 100}
	for _, src := range []chargeback.Source{chargeback.SourceAuto, chargeback.SourceRaw} {
		// Query.GroupBy without graph: the report adds it.
		versions, err := svc.Report(t.Context(), finance, chargeback.Query{From: from, To: to, GroupBy: []chargeback.Dimension{chargeback.DimGraphVersion}, Source: src})
		if err != nil {
			t.Fatal(err)
		}
		graphs, err := svc.Report(t.Context(), finance, chargeback.Query{From: from, To: to, GroupBy: []chargeback.Dimension{chargeback.DimGraph}, Source: src})
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]int64{}
		for _, r := range versions.Rows {
			got[r.Graph+"/"+r.GraphVersion] = r.CostX3600
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("source %d: by graph version %v, want %v", src, got, want)
		}
		for _, g := range graphs.Rows {
			var sum int64
			for _, r := range versions.Rows {
				if r.Graph == g.Graph {
					sum += r.CostX3600
				}
			}
			if sum != g.CostX3600 {
				t.Errorf("source %d: graph %q costs %d, its versions %d", src, g.Graph, g.CostX3600, sum)
			}
		}
		if versions.Total.CostMicroUSD != graphs.Total.CostMicroUSD || versions.Total.CostX3600 != fraud {
			t.Errorf("source %d: totals %d and %d µUSD (x3600 %d, want %d)", src, versions.Total.CostMicroUSD, graphs.Total.CostMicroUSD, versions.Total.CostX3600, fraud)
		}
		var csv strings.Builder
		if err := chargeback.WriteCSV(&csv, versions); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(csv.String(), ",doc-flow,g2\r\n") {
			t.Errorf("source %d: the CSV has no doc-flow g2 row:\n%s", src, csv.String())
		}
	}
}
