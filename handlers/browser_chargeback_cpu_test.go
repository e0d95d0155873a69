package handlers

import (
	"encoding/csv"
	"math"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"
	"github.com/chromedp/chromedp"
	"github.com/coder/quartz"

	"modelplane/auth"
	"modelplane/internal/chtest"
)

// TestBrowserChargebackKeepsCPUApart: risk ran on two CPU cores only,
// search on a GPU and on a MIG slice of an endpoint since deleted. Finance
// sees risk with 0.00 GPU-hours, its 3.00 CPU core-hours and its GPU
// utilisation "not measured"; the deleted endpoint marked; every figure of
// the page equal to the CSV's; dated chart axes; and the fleet page's
// metered figure with GPU-seconds and CPU core-seconds apart.
func TestBrowserChargebackKeepsCPUApart(t *testing.T) {
	t.Parallel()
	ch := chtest.New(t)
	clk := quartz.NewMock(t)
	clk.Set(cbDay.Add(12*time.Hour + 30*time.Minute))
	e := newTestEnvWith(t, envOptions{CH: ch, Clock: clk})
	b, err := ch.PrepareBatch(t.Context(), "INSERT INTO gpu_usage (ts, node, gpu, gpu_type, profile, team, endpoint, model, version, util_pct, requests, rate_uusd_per_hour, batch_id, row_idx)")
	if err != nil {
		t.Fatal(err)
	}
	start := cbDay.Add(10 * time.Hour)
	i := uint32(0)
	for s := start; s.Before(start.Add(90 * time.Minute)); s = s.Add(time.Second) {
		for _, r := range []struct {
			node                                             string
			gpu                                              uint16
			gpuType, profile, team, endpoint, model, version string
			util                                             float32
			requests, rate                                   uint64
		}{
			{"cpu-1", 0, "cpu", "cpu-core", "risk", "risk-endpoint", "risk-model", "v1", 80, 2, 40_000},
			{"cpu-1", 1, "cpu", "cpu-core", "risk", "risk-endpoint", "risk-model", "v1", 80, 0, 40_000},
			{"n1", 0, "A100-80GB", "full", "search", "search-endpoint", "search-model", "v1", 30, 700, 3_500_000},
			{"n1", 1, "A100-80GB", "mig-1g.10gb", "search", "old-endpoint", "search-model", "v1", 50, 1, 500_000},
		} {
			if err := b.Append(s, r.node, r.gpu, r.gpuType, r.profile, r.team, r.endpoint, r.model, r.version, r.util, r.requests, r.rate, "b", i); err != nil {
				t.Fatal(err)
			}
			i++
		}
	}
	if err := b.Send(); err != nil {
		t.Fatal(err)
	}

	br := newBrowser(t)
	const page = "/chargeback?period=custom&from=2026-10-07&to=2026-10-07&group_by=team&group_by=endpoint"
	br.do("sign in as finance on the way to the day's chargeback by team and endpoint",
		chromedp.Navigate(e.URL+page),
		chromedp.Click(chromedp.CSS(`button[data-user="finance@example.com"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#chargeback tfoot .cost`)),
	)
	type cells = map[string]string
	rows := browserRun(br, "read the table", chromedp.Evaluate[[]cells](`[...document.querySelectorAll('#chargeback tbody tr, #chargeback tfoot tr')].map(tr => ({
		team: tr.cells[0].textContent.trim(), endpoint: tr.cells[1].textContent.trim().replace(/\s+deleted$/, ''),
		deleted: tr.hasAttribute('data-deleted') ? 'yes' : '', gpu: tr.querySelector('.gpu-hours').textContent.trim(),
		cpu: tr.querySelector('.cpu-hours').textContent.trim(), cost: tr.querySelector('.cost').textContent.trim(),
		requests: tr.querySelector('.requests').textContent.trim(), per1k: tr.querySelector('.per-1k').textContent.trim(),
		util: tr.querySelector('.util').textContent.trim()}))`))
	got := map[string]cells{}
	for _, r := range rows {
		got[r["team"]+"/"+r["endpoint"]] = r
	}
	want := map[string]cells{
		"risk/risk-endpoint":     {"gpu": "0.00", "cpu": "3.00", "cost": "0.12", "util": "not measured", "deleted": "", "requests": "10,800"},
		"search/search-endpoint": {"gpu": "1.50", "cpu": "0.00", "cost": "5.25", "util": "30.0%", "deleted": "", "requests": "3,780,000", "per1k": "$0.0014"},
		"search/old-endpoint":    {"gpu": "1.50", "cpu": "0.00", "cost": "0.75", "util": "50.0%", "deleted": "yes", "requests": "5,400"},
		"Total/":                 {"gpu": "3.00", "cpu": "3.00", "cost": "6.12", "util": "40.0%", "requests": "3,796,200"},
	}
	for k, w := range want {
		for col, v := range w {
			if got[k][col] != v {
				t.Errorf("row %s, %s = %q, want %q (row %v)", k, col, got[k][col], v, got[k])
			}
		}
	}
	if len(rows) != len(want) {
		t.Errorf("%d rows, want %d: %v", len(rows), len(want), rows)
	}
	days := browserRun(br, "read the chart's dates", chromedp.Evaluate[[]string](
		`[...document.querySelectorAll('figure[data-chart="daily-cost"] text[data-axis="x"]')].map(t => t.textContent)`))
	if len(days) != 1 || days[0] != "Oct 7" {
		t.Errorf("daily chart dates = %q, want [Oct 7]", days)
	}

	// The page adds up with the CSV: every row's hours, cost and requests
	// are the CSV's, rounded to what the page shows.
	sc := br.cookie(e.URL, auth.SessionCookie)
	if sc == nil {
		t.Fatal("no session cookie")
	}
	href := browserRun(br, "read the CSV link", chromedp.Evaluate[string](`document.getElementById('csv-download').getAttribute('href')`))
	res := e.send(t, http.MethodGet, href, nil, func(r *http.Request) { r.AddCookie(&http.Cookie{Name: auth.SessionCookie, Value: sc.Value}) })
	if res.status != http.StatusOK {
		t.Fatalf("CSV = %d %s", res.status, res)
	}
	_, body, _ := strings.Cut(res.String(), "\r\n") // the comment line
	recs, err := csv.NewReader(strings.NewReader(body)).ReadAll()
	if err != nil || len(recs) < 2 {
		t.Fatalf("CSV %v:\n%s", err, body)
	}
	col := map[string]int{}
	for i, c := range recs[0] {
		col[c] = i
	}
	hours := func(s string) string {
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			t.Fatalf("hours %q: %v", s, err)
		}
		return strconv.FormatFloat(math.Round(f*100)/100, 'f', 2, 64)
	}
	for _, r := range recs[1:] {
		k := r[col["team"]] + "/" + r[col["endpoint"]]
		if r[col["kind"]] == "total" {
			k = "Total/"
		}
		p, ok := got[k]
		if !ok {
			t.Errorf("CSV row %s is not on the page", k)
			continue
		}
		cost, _ := strconv.ParseFloat(r[col["cost_usd"]], 64)
		util := "not measured"
		if u := r[col["avg_gpu_util_pct"]]; u != "" {
			f, _ := strconv.ParseFloat(u, 64)
			util = strconv.FormatFloat(f, 'f', 1, 64) + "%"
		}
		if hours(r[col["gpu_hours"]]) != p["gpu"] || hours(r[col["cpu_core_hours"]]) != p["cpu"] ||
			strconv.FormatFloat(cost, 'f', 2, 64) != p["cost"] || strings.ReplaceAll(p["requests"], ",", "") != r[col["requests"]] || util != p["util"] {
			t.Errorf("CSV row %s = %v; the page shows %v", k, r, p)
		}
	}
	if p := br.problems(); len(p) > 0 {
		t.Errorf("the browser console reported problems:\n%s", strings.Join(p, "\n"))
	}

	// The API keeps them apart as the CSV does: risk held no GPU.
	var api ChargebackBody
	e.getJSON(t, e.Keys["finance"], "/chargeback?from=2026-10-07&to=2026-10-08&group_by=team", &api)
	found := false
	for _, r := range api.Rows {
		if *r.Team != "risk" {
			continue
		}
		found = true
		if r.GPUSeconds != 0 || r.GPUHours != "0" || r.CPUCoreSeconds != 2*90*60 || r.CPUCoreHours != "3" || r.AvgGPUUtilPct != nil {
			t.Errorf("API row for risk = %+v; want 0 GPU-seconds, 10,800 CPU core-seconds (3 hours) and no GPU utilisation", r)
		}
	}
	if !found {
		t.Errorf("the API has no row for risk: %+v", api.Rows)
	}

	// The fleet page's metered figure (platform admins): today has no usage, so read it on
	// the metered day.
	clk.Set(cbDay.Add(23 * time.Hour))
	fleet := e.portal(t, e.signIn(t, "admin@example.com"), http.MethodGet, "/fleet", nil)
	doc, err := goquery.NewDocumentFromReader(strings.NewReader(fleet.String()))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := doc.Find("main").Text(), "10,800 GPU-seconds and 10,800 CPU core-seconds metered today (UTC), $6.12"; !strings.Contains(got, want) {
		t.Errorf("fleet page lacks %q:\n%s", want, got)
	}
}
