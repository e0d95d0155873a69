package handlers

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"

	"modelplane/busapi"
	"modelplane/internal/chtest"
)

// newStatsEnv is a test env whose Traffic reads a fresh ClickHouse holding
// one window of risk-endpoint v1 (100 requests, 5 failed, each with about
// 1 ms of gateway overhead; its slowest request and a failure named) and
// one of a streaming v2 (a sampled request named), both within the last
// minute.
func newStatsEnv(t *testing.T) *testEnv {
	t.Helper()
	ch := chtest.New(t)
	ctx := context.Background()
	e := newTestEnvWith(t, envOptions{CH: ch})
	var id int64
	if err := e.pool.QueryRow(ctx, "SELECT id FROM endpoints WHERE name = 'risk-endpoint'").Scan(&id); err != nil {
		t.Fatal(err)
	}
	batch, err := ch.PrepareBatch(ctx, "INSERT INTO request_stats (window_start, window_start_ms, window_end, window_end_ms, "+
		"gateway, endpoint, team, version, requests, errors_client, errors_upstream, errors_timeout, errors_shed, canceled, "+
		"latency_buckets, latency_sum_ms, streams, ttft_buckets, ttft_sum_ms, tpot_buckets, tpot_sum_ms, tokens, msg_id, stream_seq, endpoint_id, "+
		"overhead_buckets, notable_kind, notable_request_id, notable_trace_id, notable_replica, notable_status, notable_end_ms, notable_latency_ms, notable_upstream_ms)")
	if err != nil {
		t.Fatal(err)
	}
	at := time.Now().Add(-20 * time.Second).Truncate(time.Second)
	hist := func(n uint64, bucket int) []uint64 {
		h := make([]uint64, busapi.LatencyBuckets)
		h[bucket] = n
		return h
	}
	type named struct {
		kind, id, trace, replica []string
		status                   []uint16
		end                      []int64
		latency, upstream        []float64
	}
	endMS := at.Add(2 * time.Second).UnixMilli()
	for i, v := range []struct {
		version                 string
		requests, errs, streams uint64
		ttft, tpot, overhead    []uint64
		notable                 named
	}{
		{"v1", 100, 5, 0, []uint64{}, []uint64{}, hist(100, busapi.LatencyBucket(time.Millisecond)), named{
			kind: []string{busapi.NotableSlowest, busapi.NotableFailed}, id: []string{"req-slow", "req-fail"}, trace: []string{"trace-slow", "trace-fail"},
			replica: []string{"risk-endpoint-v1-a", "risk-endpoint-v1-b"}, status: []uint16{200, 503}, end: []int64{endMS, endMS + 1},
			latency: []float64{40, 12}, upstream: []float64{37.5, 11}}},
		{"v2", 10, 0, 10, hist(10, 8), hist(10, 2), []uint64{}, named{
			kind: []string{busapi.NotableSampled}, id: []string{"req-sampled"}, trace: []string{""}, replica: []string{"risk-endpoint-v2-a"},
			status: []uint16{200}, end: []int64{endMS}, latency: []float64{300}, upstream: []float64{299}}},
	} {
		n := v.notable
		if err := batch.Append(at, uint16(0), at.Add(5*time.Second), uint16(0), "gw-1", "risk-endpoint", "risk", v.version,
			v.requests, uint64(0), v.errs, uint64(0), uint64(0), uint64(0), hist(v.requests, 10), float64(0),
			v.streams, v.ttft, float64(0), v.tpot, float64(0), uint64(0), v.version, uint64(i), id,
			v.overhead, n.kind, n.id, n.trace, n.replica, n.status, n.end, n.latency, n.upstream); err != nil {
			t.Fatal(err)
		}
	}
	if err := batch.Send(); err != nil {
		t.Fatal(err)
	}
	return e
}

func TestPortalStats(t *testing.T) {
	t.Parallel()
	e := newStatsEnv(t)
	u := portalSignIn(t, e, "risk-viewer@example.com")
	for _, path := range []string{"/endpoints/risk-endpoint", "/endpoints/risk-endpoint/stats"} {
		doc := u.page(path)
		portalCheckMarkup(t, path, doc)
		sec := doc.Find("section#stats")
		if sec.Length() != 1 {
			t.Fatalf("%s: %d #stats sections, want 1", path, sec.Length())
		}
		if got := sec.AttrOr("hx-get", ""); got != "/endpoints/risk-endpoint/stats" {
			t.Errorf("%s: hx-get = %q, want the fragment route", path, got)
		}
		if got := sec.AttrOr("hx-trigger", ""); got != "every 5s" {
			t.Errorf("%s: hx-trigger = %q, want every 5s", path, got)
		}
		for version, want := range map[string][]string{"v1": {"qps", "latency", "errors"}, "v2": {"qps", "latency", "errors", "ttft", "tpot"}} {
			var got []string
			sec.Find(`[data-version="` + version + `"] figure.chart`).Each(func(_ int, c *goquery.Selection) {
				got = append(got, c.AttrOr("data-chart", ""))
			})
			if len(got) != len(want) {
				t.Errorf("%s: %s charts %v, want %v", path, version, got, want)
				continue
			}
			for i := range want {
				if got[i] != want[i] {
					t.Errorf("%s: %s charts %v, want %v", path, version, got, want)
				}
			}
		}
		// 10 minutes of 10-second steps: 60 points a line.
		pts := sec.Find(`[data-version="v1"] [data-chart="latency"] polyline[data-line="p99"]`).AttrOr("points", "")
		if n := len(strings.Fields(pts)); n != 60 {
			t.Errorf("%s: p99 line has %d points, want 60", path, n)
		}
		if got := sec.Find(`[data-version="v1"] [data-chart="qps"] figcaption`).Text(); !strings.Contains(got, "max 10 req/s") {
			t.Errorf("%s: QPS caption %q, want max 10 req/s (100 requests in a 10 s step)", path, got)
		}
		if got := sec.Find(`[data-version="v1"] [data-chart="errors"] figcaption`).Text(); !strings.Contains(got, "max 5 %") {
			t.Errorf("%s: error caption %q, want max 5 %%", path, got)
		}
	}
	// Another team sees neither the page nor the fragment.
	s := portalSignIn(t, e, "search-admin@example.com")
	for _, path := range []string{"/endpoints/risk-endpoint", "/endpoints/risk-endpoint/stats"} {
		if r := s.get(path); r.StatusCode != http.StatusNotFound {
			t.Errorf("GET %s as search-admin = %d, want 404", path, r.StatusCode)
		}
	}
}

func TestAPIStats(t *testing.T) {
	t.Parallel()
	e := newStatsEnv(t)
	status, body := e.api(e.Keys["risk-viewer"], http.MethodGet, "/endpoints/risk-endpoint/stats?minutes=5", nil)
	if status != http.StatusOK {
		t.Fatalf("GET stats = %d, want 200\n%s", status, body)
	}
	var got StatsBody
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatal(err)
	}
	if !got.Available || got.StepSeconds != 10 || len(got.Versions) != 2 || len(got.Versions[0].Points) != 30 {
		t.Fatalf("stats = step %v, %d versions, want 10 s steps of 2 versions with 30 points", got.StepSeconds, len(got.Versions))
	}
	var requests, errs uint64
	for _, p := range got.Versions[0].Points {
		requests += p.Requests
		errs += p.Errors
	}
	if requests != 100 || errs != 5 || got.Versions[0].Streaming || !got.Versions[1].Streaming {
		t.Errorf("v1: %d requests, %d errors, streaming %v/%v; want 100, 5, false/true", requests, errs, got.Versions[0].Streaming, got.Versions[1].Streaming)
	}
	for _, q := range []string{"minutes=0", "minutes=361", "minutes=x"} {
		if status, _ := e.api(e.Keys["risk-viewer"], http.MethodGet, "/endpoints/risk-endpoint/stats?"+q, nil); status != http.StatusBadRequest {
			t.Errorf("GET stats?%s = %d, want 400", q, status)
		}
	}
	if status, _ := e.api(e.Keys["search-admin"], http.MethodGet, "/endpoints/risk-endpoint/stats", nil); status != http.StatusNotFound {
		t.Errorf("GET stats as search-admin = %d, want 404", status)
	}
}

func TestStatsUnavailable(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	u := portalSignIn(t, e, "risk-viewer@example.com")
	doc := u.page("/endpoints/risk-endpoint")
	if got := doc.Find("#stats #stats-unavailable").Text(); got != statsUnavailable {
		t.Errorf("stats section says %q, want %q", got, statsUnavailable)
	}
	status, body := e.api(e.Keys["risk-viewer"], http.MethodGet, "/endpoints/risk-endpoint/stats", nil)
	var got StatsBody
	if err := json.Unmarshal(body, &got); status != http.StatusOK || err != nil || got.Available || len(got.Versions) != 0 {
		t.Errorf("GET stats without a reader = %d %s, want 200 with available false", status, body)
	}
	if status, _ := e.api(e.Keys["search-admin"], http.MethodGet, "/endpoints/risk-endpoint/stats", nil); status != http.StatusNotFound {
		t.Errorf("GET stats as search-admin without a reader = %d, want 404", status)
	}
}

// TestRequestExplorer: the endpoint page's traffic section and the API
// list the requests the gateways named (the slowest, the failed, the
// sampled) with version, replica, status, ids and the split of their
// latency, and the p99 of the gateway's overhead against the 5 ms budget,
// per version and for the endpoint; another team gets 404 from both.
func TestRequestExplorer(t *testing.T) {
	t.Parallel()
	e := newStatsEnv(t)
	u := portalSignIn(t, e, "risk-viewer@example.com")
	doc := u.page("/endpoints/risk-endpoint/stats")
	x := doc.Find("#explorer")
	if p99 := strings.TrimSpace(x.Find("#overhead-p99").Text()); p99 == "" || x.Find("#overhead-p99.err").Length() != 0 ||
		!strings.Contains(x.Find("#overhead").Text(), "over 100 requests; budget 5 ms") {
		t.Errorf("overhead line = %q (p99 %q); want a p99 within the 5 ms budget over 100 requests", strings.Join(strings.Fields(x.Find("#overhead").Text()), " "), p99)
	}
	if got := x.Find(`#overhead-versions tr[data-version="v2"]`).Text(); !strings.Contains(got, "–") {
		t.Errorf("v2 overhead row %q; want no quantiles (no request measured)", got)
	}
	cells := func(table, id string) []string {
		var out []string
		x.Find(table + ` tr[data-request="` + id + `"] td`).Each(func(_ int, td *goquery.Selection) { out = append(out, strings.TrimSpace(td.Text())) })
		return out
	}
	for _, c := range []struct {
		table, id string
		want      []string
	}{
		{"#requests-slowest", "req-slow", []string{"v1", "risk-endpoint-v1-a", "200", "40.00 ms", "37.50 ms", "2.50 ms", "req-slow", "trace-slow"}},
		{"#requests-failed", "req-fail", []string{"v1", "risk-endpoint-v1-b", "503", "12.00 ms", "11.00 ms", "1.00 ms", "req-fail", "trace-fail"}},
		{"#requests-sampled", "req-sampled", []string{"v2", "risk-endpoint-v2-a", "200", "300.00 ms", "299.00 ms", "1.00 ms", "req-sampled", ""}},
	} {
		got := cells(c.table, c.id)
		if len(got) != len(c.want)+1 || strings.Join(got[1:], "|") != strings.Join(c.want, "|") {
			t.Errorf("%s row %s = %q, want ended time then %q", c.table, c.id, got, c.want)
		}
	}

	status, body := e.api(e.Keys["risk-viewer"], http.MethodGet, "/endpoints/risk-endpoint/requests?minutes=5", nil)
	var got ExplorerBody
	if status != http.StatusOK || json.Unmarshal(body, &got) != nil {
		t.Fatalf("GET requests = %d %s, want 200", status, body)
	}
	if !got.Available || len(got.Slowest) != 1 || got.Slowest[0].RequestID != "req-slow" || len(got.Sampled) != 1 || len(got.Failed) != 1 ||
		got.Failed[0].TraceID != "trace-fail" || got.Failed[0].OverheadMS != 1 || got.All.Requests != 100 || got.All.P99MS <= 0 || got.All.P99MS > 1 {
		t.Errorf("explorer = %s; want v1's slowest, v2's sampled, the failure with its trace id and split, p99 overhead within 1 ms", body)
	}
	for _, q := range []string{"minutes=0", "minutes=361"} {
		if status, _ := e.api(e.Keys["risk-viewer"], http.MethodGet, "/endpoints/risk-endpoint/requests?"+q, nil); status != http.StatusBadRequest {
			t.Errorf("GET requests?%s = %d, want 400", q, status)
		}
	}
	if status, _ := e.api(e.Keys["search-admin"], http.MethodGet, "/endpoints/risk-endpoint/requests", nil); status != http.StatusNotFound {
		t.Errorf("GET requests as search-admin = %d, want 404", status)
	}
}
