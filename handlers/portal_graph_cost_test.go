package handlers

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"modelplane/busapi"
	"modelplane/ingest"
)

// graphStepCalls stores one gateway window of requests of risk-endpoint
// at at, made by risk directly or as steps of graph.
func graphStepCalls(t *testing.T, ch driver.Conn, at time.Time, graph string, requests uint64) {
	t.Helper()
	lat := make([]uint64, busapi.LatencyBuckets)
	lat[0] = requests
	zero := make([]uint64, busapi.LatencyBuckets)
	s := busapi.ReqStats{ID: fmt.Sprintf("gw/risk-endpoint/v1/%d/%s", at.UnixMilli(), graph), WindowStart: at.UnixMilli(),
		WindowEnd: at.Add(5 * time.Second).UnixMilli(), Gateway: "gw", Endpoint: "risk-endpoint", Team: "risk", Version: "v1",
		Count: requests, Latency: lat, TTFT: zero, TPOT: zero, ViaGraph: graph}
	if graph != "" {
		s.ViaGraphVersion = "v1"
	}
	if err := ingest.StoreReqStats(t.Context(), ch, []busapi.ReqStats{s}); err != nil {
		t.Fatal(err)
	}
}

// TestGraphPageShowsCostByStep: a graph endpoint's page shows this month's
// cost of the graph broken down by the step endpoints it called, each its
// share of that endpoint's cost (a quarter of risk-endpoint's 10:00 hour,
// half of its 11:00 half hour: $0.875 each, worked by hand), and the API
// grouped by endpoint and graph gives the same share beside the owners'
// rest, adding up to the endpoint's cost.
func TestGraphPageShowsCostByStep(t *testing.T) {
	t.Parallel()
	e, ch := newChargebackEnv(t)
	def := `{"entry":"a","nodes":[{"id":"a","type":"call","endpoint":"risk-endpoint"}]}`
	if r := e.call(t, e.Keys["risk-admin"], http.MethodPost, "/graphs", graphBody("risk-graph", def)); r.status != http.StatusCreated {
		t.Fatalf("POST /graphs = %d %s", r.status, r)
	}
	graphStepCalls(t, ch, cbDay.Add(10*time.Hour+5*time.Minute), "", 30)
	graphStepCalls(t, ch, cbDay.Add(10*time.Hour+6*time.Minute), "risk-graph", 10)
	graphStepCalls(t, ch, cbDay.Add(11*time.Hour+5*time.Minute), "", 5)
	graphStepCalls(t, ch, cbDay.Add(11*time.Hour+6*time.Minute), "risk-graph", 5)

	u := portalSignIn(t, e, "risk-viewer@example.com")
	d := u.page("/endpoints/risk-graph")
	cost := d.Find("#graph-cost")
	if cost.Length() != 1 {
		t.Fatalf("the graph's page has no cost section")
	}
	step := cost.Find(`tr[data-step="risk-endpoint"]`)
	cells := step.Find("td")
	if step.Length() != 1 || cells.Length() != 3 || strings.TrimSpace(cells.Eq(2).Text()) != "$1.75" || strings.TrimSpace(cells.Eq(1).Text()) != "5,400" {
		t.Errorf("risk-endpoint's step row %q; want 5,400 requests and $1.75", strings.Join(strings.Fields(step.Text()), " "))
	}
	if got := strings.TrimSpace(cost.Find("#graph-cost-total").Text()); got != "$1.75" || cost.Find("tbody tr").Length() != 1 {
		t.Errorf("total %q over %d rows; want $1.75 over the one step", got, cost.Find("tbody tr").Length())
	}
	if href := cost.Find(`a[href^="/chargeback/csv"]`).AttrOr("href", ""); !strings.Contains(href, "graph=risk-graph") {
		t.Errorf("CSV link %q; want the graph's breakdown", href)
	}

	var rep ChargebackBody
	e.getJSON(t, e.Keys["finance"], "/chargeback?from=2026-10-07&to=2026-10-08&endpoint=risk-endpoint&group_by=endpoint,graph", &rep)
	parts := map[string]int64{}
	for _, r := range rep.Rows {
		if r.Graph == nil {
			t.Fatalf("row %+v has no graph", r)
		}
		parts[*r.Graph] = r.CostUUSD
	}
	if len(parts) != 2 || parts["risk-graph"] != 1_750_000 || parts[""] != 5_250_000-1_750_000 || rep.Total.CostUUSD != 5_250_000 {
		t.Errorf("risk-endpoint by graph %v, total %d; want risk-graph 1,750,000 and the rest of 5,250,000", parts, rep.Total.CostUUSD)
	}
	b, _ := json.Marshal(rep.GroupBy)
	if string(b) != `["endpoint","graph"]` {
		t.Errorf("group_by %s", b)
	}
}

// TestChargebackPageByGraph: the chargeback page grouped by graph names
// calls from outside a graph and links a graph to its cost by step.
func TestChargebackPageByGraph(t *testing.T) {
	t.Parallel()
	e, ch := newChargebackEnv(t)
	graphStepCalls(t, ch, cbDay.Add(10*time.Hour+5*time.Minute), "", 30)
	graphStepCalls(t, ch, cbDay.Add(10*time.Hour+6*time.Minute), "risk-graph", 10)
	u := portalSignIn(t, e, "risk-viewer@example.com")
	d := u.page("/chargeback?period=custom&from=2026-10-07&to=2026-10-07&group_by=graph")
	text := d.Text()
	link := d.Find(`a[href*="graph=risk-graph"]`)
	if !strings.Contains(text, "(no graph)") || link.Length() != 1 || !strings.Contains(link.AttrOr("href", ""), "group_by=endpoint") {
		t.Errorf("by graph: (no graph) shown %v, links to risk-graph's breakdown %d", strings.Contains(text, "(no graph)"), link.Length())
	}
	step := u.page(link.AttrOr("href", ""))
	if !strings.Contains(step.Text(), "risk-endpoint") || !strings.Contains(step.Text(), "0.88") {
		t.Errorf("risk-graph's breakdown lacks risk-endpoint's share of $0.875")
	}
}
