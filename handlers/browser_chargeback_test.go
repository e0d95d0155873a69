package handlers

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"modelplane/auth"
)

// TestBrowserChargeback is the "done when" in Chromium: finance
// signs in, picks last month, sees the table, both charts and the total,
// and downloads a CSV whose total matches the usage metered (5,400 s each
// of a $3.50/h GPU, a $0.50/h slice and an idle $3.50/h GPU: $11.25); a
// team member picking the same month sees only their team.
func TestBrowserChargeback(t *testing.T) {
	t.Parallel()
	e, _ := newChargebackEnvAt(t, time.Date(2026, 11, 3, 12, 0, 0, 0, time.UTC))
	b := newBrowser(t)
	const user = "finance@example.com"
	b.do("sign in as "+user+" on the way to chargeback",
		chromedp.Navigate(e.URL+"/chargeback"),
		chromedp.Click(chromedp.CSS(`button[data-user="`+user+`"]`)),
		chromedp.WaitVisible(chromedp.ID("chargeback-form")),
	)
	b.do("pick last month",
		chromedp.Click(chromedp.CSS(`input[name="period"][value="last"]`)),
		chromedp.Click(chromedp.CSS(`#chargeback-form button`)),
		chromedp.WaitVisible(chromedp.CSS(`#chargeback[data-period="last"] tfoot .cost`)),
	)
	if got := b.text("#chargeback tfoot .cost"); got != "11.25" {
		t.Errorf("total cost shown = %q, want 11.25", got)
	}
	if got := b.text("#chargeback tbody"); !strings.Contains(got, "(unallocated)") || !strings.Contains(got, "risk") || !strings.Contains(got, "search") {
		t.Errorf("table = %q, want the unallocated GPU, risk and search", got)
	}
	bars := browserRun(b, "count chart shapes", chromedp.Evaluate[int](
		`document.querySelectorAll('figure[data-chart="daily-cost"] rect').length + 100*document.querySelectorAll('figure[data-chart="top-endpoints"] g[data-bar]').length`))
	if bars != 3+200 { // one day stacked by three teams; two endpoints
		t.Errorf("chart shapes = %d, want 3 daily segments and 2 endpoint bars (203)", bars)
	}
	href := browserRun(b, "read the CSV link", chromedp.Evaluate[string](`document.getElementById('csv-download').getAttribute('href')`))
	if !strings.Contains(href, "period=last") {
		t.Errorf("CSV link %q does not carry the period", href)
	}
	sc := b.cookie(e.URL, auth.SessionCookie)
	if sc == nil {
		t.Fatal("no session cookie")
	}
	csv := e.send(t, http.MethodGet, href, nil, func(r *http.Request) { r.AddCookie(&http.Cookie{Name: auth.SessionCookie, Value: sc.Value}) })
	body := csv.String()
	if csv.status != http.StatusOK || !strings.HasPrefix(body, "# modelplane chargeback; period 2026-10-01T00:00:00Z to 2026-11-01T00:00:00Z") ||
		!strings.Contains(body, "\r\ntotal,,,,,,,16200,4.5,11.250000,11250000,") {
		t.Errorf("CSV download = %d:\n%s\nwant last month with the $11.25 total", csv.status, body)
	}
	shot(b, "/tmp/portal-chargeback.png")
	if p := b.problems(); len(p) > 0 {
		t.Errorf("the browser console reported problems:\n%s", strings.Join(p, "\n"))
	}

	r := newBrowser(t)
	r.do("sign in as a risk engineer and pick last month",
		chromedp.Navigate(e.URL+"/chargeback?period=last"),
		chromedp.Click(chromedp.CSS(`button[data-user="risk-engineer@example.com"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#chargeback tfoot .cost`)),
	)
	if got := r.text("#chargeback tfoot .cost"); got != "5.25" {
		t.Errorf("risk engineer's total = %q, want 5.25 (risk alone)", got)
	}
	if got := r.text("main"); strings.Contains(got, "search") || strings.Contains(got, "(unallocated)") {
		t.Errorf("risk engineer's page shows another team or the idle GPU:\n%s", got)
	}
}
