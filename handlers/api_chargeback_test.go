package handlers

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/coder/quartz"

	"modelplane/chargeback"
	"modelplane/internal/chtest"
)

// cbDay is the day the chargeback tests meter.
var cbDay = time.Date(2026, 10, 7, 0, 0, 0, 0, time.UTC)

// newChargebackEnv is a test env with ClickHouse holding 90 minutes of
// usage from 10:00 on cbDay: a risk GPU, a search slice and an idle GPU,
// and a clock an hour after the last second.
func newChargebackEnv(t *testing.T) (*testEnv, driver.Conn) {
	t.Helper()
	return newChargebackEnvAt(t, cbDay.Add(12*time.Hour+30*time.Minute))
}

// newChargebackEnvAt is newChargebackEnv with the clock at at.
func newChargebackEnvAt(t *testing.T, at time.Time) (*testEnv, driver.Conn) {
	t.Helper()
	ch := chtest.New(t)
	clk := quartz.NewMock(t)
	clk.Set(at)
	e := newTestEnvWith(t, envOptions{CH: ch, Clock: clk})
	b, err := ch.PrepareBatch(t.Context(), "INSERT INTO gpu_usage (ts, node, gpu, gpu_type, profile, team, endpoint, model, version, requests, rate_uusd_per_hour, batch_id, row_idx)")
	if err != nil {
		t.Fatal(err)
	}
	start := cbDay.Add(10 * time.Hour)
	i := uint32(0)
	for s := start; s.Before(start.Add(90 * time.Minute)); s = s.Add(time.Second) {
		for _, r := range []struct {
			gpu                                     uint16
			profile, team, endpoint, model, version string
			requests, rate                          uint64
		}{
			{0, "full", "risk", "risk-endpoint", "risk-model", "v1", 3, 3_500_000},
			{1, "mig-1g.10gb", "search", "search-endpoint", "search-model", "v1", 1, 500_000},
			{2, "full", "", "", "", "", 0, 3_500_000},
		} {
			if err := b.Append(s, "n1", r.gpu, "A100-80GB", r.profile, r.team, r.endpoint, r.model, r.version, r.requests, r.rate, "b", i); err != nil {
				t.Fatal(err)
			}
			i++
		}
	}
	if err := b.Send(); err != nil {
		t.Fatal(err)
	}
	return e, ch
}

// TestChargebackAPI: finance sees every team and the idle GPU, a risk
// engineer only risk (in rows and total), CSV comes by Accept or format,
// and a bad grouping is a 400.
func TestChargebackAPI(t *testing.T) {
	t.Parallel()
	e, _ := newChargebackEnv(t)
	path := "/chargeback?from=2026-10-07&to=2026-10-08&group_by=team"
	var fin ChargebackBody
	e.getJSON(t, e.Keys["finance"], path, &fin)
	// 5,400 s of each: risk 5,400 × 3.5 $/h = $5.25, search $0.75, idle $5.25.
	costs := map[string]int64{}
	for _, r := range fin.Rows {
		costs[*r.Team] = r.CostUUSD
	}
	if want := map[string]int64{"": 5_250_000, "risk": 5_250_000, "search": 750_000}; len(costs) != 3 || costs[""] != want[""] ||
		costs["risk"] != want["risk"] || costs["search"] != want["search"] {
		t.Errorf("finance rows = %v, want %v", costs, want)
	}
	if fin.Total.CostUUSD != 11_250_000 || fin.Total.CostUSD != "11.250000" || fin.Total.GPUSeconds != 16_200 || fin.RatesVersion == "" {
		t.Errorf("finance total = %+v (rates %q), want 11,250,000 µUSD over 16,200 s", fin.Total, fin.RatesVersion)
	}
	var risk ChargebackBody
	e.getJSON(t, e.Keys["risk-engineer"], path, &risk)
	if len(risk.Rows) != 1 || *risk.Rows[0].Team != "risk" || risk.Total.CostUUSD != 5_250_000 || risk.Total.Requests != 16_200 {
		t.Errorf("risk engineer sees %+v, total %+v; want risk alone", risk.Rows, risk.Total)
	}
	if r := e.call(t, e.Keys["risk-engineer"], http.MethodGet, "/chargeback?from=2026-10-07&to=2026-10-08&team=search&group_by=endpoint", nil); r.status != http.StatusOK ||
		strings.Contains(r.String(), "search-endpoint") {
		t.Errorf("risk engineer drilling into search = %d %s; want 200 without search's rows", r.status, r)
	}
	for _, c := range []struct {
		name    string
		path    string
		headers []string
	}{
		{"accept", path + ",endpoint", []string{"Accept", "text/csv"}},
		{"format", path + ",endpoint&format=csv", nil},
	} {
		r := e.call(t, e.Keys["finance"], http.MethodGet, c.path, nil, c.headers...)
		body := r.String()
		if r.status != http.StatusOK || !strings.HasPrefix(r.header.Get("Content-Type"), "text/csv") ||
			!strings.HasPrefix(body, "# modelplane chargeback; period 2026-10-07T00:00:00Z to 2026-10-08T00:00:00Z") ||
			!strings.Contains(body, "\r\ngroup,risk,risk-endpoint,") || !strings.Contains(body, "\r\ntotal,,,,,,,16200,4.5,11.250000,11250000,") {
			t.Errorf("%s: %d %s\n%s; want the CSV", c.name, r.status, r.header.Get("Content-Type"), body)
		}
		if !strings.Contains(r.header.Get("Content-Disposition"), "chargeback_20261007T000000Z_20261008T000000Z.csv") {
			t.Errorf("%s: Content-Disposition %q", c.name, r.header.Get("Content-Disposition"))
		}
	}
	problem(t, "bad group_by", e.call(t, e.Keys["finance"], http.MethodGet, "/chargeback?from=2026-10-07&to=2026-10-08&group_by=region", nil), http.StatusBadRequest)
	problem(t, "bad period", e.call(t, e.Keys["finance"], http.MethodGet, "/chargeback?from=2026-10-08&to=2026-10-07", nil), http.StatusBadRequest)
}

// TestCostRatesAPI: everyone reads the history; a platform admin enters a
// rate; finance (whose role changes nothing) and a team admin may not.
func TestCostRatesAPI(t *testing.T) {
	t.Parallel()
	e, _ := newChargebackEnv(t)
	var list struct {
		Items []struct {
			GPUType string `json:"gpu_type"`
		} `json:"items"`
	}
	e.getJSON(t, e.Keys["risk-viewer"], "/cost-rates", &list)
	if len(list.Items) != 13 {
		t.Errorf("risk viewer sees %d rates, want the 13 defaults (12 GPU, 1 cpu-core)", len(list.Items))
	}
	body := map[string]any{"gpu_type": "H100-80GB", "profile": "mig-1g.10gb", "uusd_per_hour": 900_000,
		"effective_from": time.Now().UTC().Add(24 * time.Hour).Format(time.RFC3339)}
	problem(t, "risk admin POST /cost-rates", e.call(t, e.Keys["risk-admin"], http.MethodPost, "/cost-rates", jsonPayload(body)), http.StatusForbidden)
	problem(t, "finance POST /cost-rates", e.call(t, e.Keys["finance"], http.MethodPost, "/cost-rates", jsonPayload(body)), http.StatusForbidden)
	r := e.call(t, e.Keys["platform-admin"], http.MethodPost, "/cost-rates", jsonPayload(body))
	var created struct {
		ID          int64 `json:"id"`
		UUSDPerHour int64 `json:"uusd_per_hour"`
	}
	if r.status != http.StatusCreated || json.Unmarshal(r.body, &created) != nil || created.UUSDPerHour != 900_000 {
		t.Fatalf("platform admin POST /cost-rates = %d %s; want 201", r.status, r)
	}
	var rep ChargebackBody
	e.getJSON(t, e.Keys["finance"], "/chargeback?from=2026-10-07&to=2026-10-08", &rep)
	if want := "r" + strings.TrimSpace(string(mustJSON(t, created.ID))); rep.RatesVersion != want {
		t.Errorf("rates version = %q, want %q (the new rate's id)", rep.RatesVersion, want)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestPortalChargeback: finance picks the day, sees both charts, the table
// with a drill-down link, the CSV link and the delayed note (the period
// reaches past the newest second); the CSV download matches the API's; a
// risk admin's page shows no other team.
func TestPortalChargeback(t *testing.T) {
	t.Parallel()
	e, _ := newChargebackEnv(t)
	fin := e.signIn(t, "finance@example.com")
	page := e.portal(t, fin, http.MethodGet, "/chargeback?period=custom&from=2026-10-07&to=2026-10-07", nil)
	body := page.String()
	for _, want := range []string{`data-chart="daily-cost"`, `data-chart="top-endpoints"`, `data-bar="risk-endpoint"`, `id="csv-download"`,
		`href="/chargeback?from=2026-10-07&amp;period=custom&amp;team=risk&amp;to=2026-10-07"`, "(unallocated)", "11.25", `id="chargeback-delayed"`} {
		if !strings.Contains(body, want) {
			t.Errorf("finance page lacks %s:\n%.3000s", want, body)
		}
	}
	if page.status != http.StatusOK {
		t.Errorf("finance page = %d", page.status)
	}
	drill := e.portal(t, fin, http.MethodGet, "/chargeback?period=custom&from=2026-10-07&to=2026-10-07&team=risk", nil)
	if !strings.Contains(drill.String(), `href="/chargeback?endpoint=risk-endpoint&amp;from=2026-10-07&amp;period=custom&amp;team=risk&amp;to=2026-10-07"`) || !strings.Contains(drill.String(), `id="crumbs"`) {
		t.Errorf("team drill-down lacks the endpoint link or crumbs:\n%.3000s", drill)
	}
	csv := e.portal(t, fin, http.MethodGet, "/chargeback/csv?period=custom&from=2026-10-07&to=2026-10-07&group_by=team&group_by=endpoint", nil)
	api := e.call(t, e.Keys["finance"], http.MethodGet, "/chargeback?from=2026-10-07&to=2026-10-08&group_by=team,endpoint&format=csv", nil)
	if csv.status != http.StatusOK || csv.String() != api.String() {
		t.Errorf("portal CSV = %d\n%s\nAPI CSV\n%s; want the same", csv.status, csv, api)
	}
	risk := e.portal(t, e.signIn(t, "risk-admin@example.com"), http.MethodGet, "/chargeback?period=custom&from=2026-10-07&to=2026-10-07", nil)
	if rb := risk.String(); risk.status != http.StatusOK || strings.Contains(rb, "search") || strings.Contains(rb, "(unallocated)") || !strings.Contains(rb, "5.25") {
		t.Errorf("risk admin page = %d, shows other teams or lacks its own:\n%.3000s", risk.status, rb)
	}
	bad := e.portal(t, fin, http.MethodGet, "/chargeback?period=custom&from=yesterday&to=2026-10-07", nil)
	if bad.status != http.StatusBadRequest || !strings.Contains(bad.String(), `id="chargeback-error"`) {
		t.Errorf("bad period = %d; want 400 with the error on the page", bad.status)
	}
}

// TestBudgetsAPI: a risk admin sets the team's budget; another team's
// admin naming risk gets the answer for a team that does not exist; the
// budget shows this month's spend to risk members and finance, on the API
// and the chargeback page, and to no one else.
func TestBudgetsAPI(t *testing.T) {
	t.Parallel()
	e, _ := newChargebackEnv(t)
	body := map[string]any{"team": "risk", "monthly_uusd": 10_000_000}
	if r := e.call(t, e.Keys["risk-admin"], http.MethodPost, "/budgets", jsonPayload(body)); r.status != http.StatusCreated {
		t.Fatalf("risk admin POST /budgets = %d %s; want 201", r.status, r)
	}
	got := e.call(t, e.Keys["search-admin"], http.MethodPost, "/budgets", jsonPayload(body))
	none := e.call(t, e.Keys["search-admin"], http.MethodPost, "/budgets", jsonPayload(map[string]any{"team": "no-such-team", "monthly_uusd": 1}))
	if got.status != http.StatusNotFound || got.String() != none.String() {
		t.Errorf("search admin naming risk = %d %s; naming nothing = %d %s; want the same 404", got.status, got, none.status, none)
	}
	problem(t, "risk viewer POST /budgets", e.call(t, e.Keys["risk-viewer"], http.MethodPost, "/budgets", jsonPayload(body)), http.StatusForbidden)
	var list budgetListBody
	for key, want := range map[string]int{"risk-viewer": 1, "finance": 1, "search-admin": 0} {
		e.getJSON(t, e.Keys[key], "/budgets", &list)
		if len(list.Items) != want {
			t.Errorf("%s sees %d budgets, want %d", key, len(list.Items), want)
		}
	}
	e.getJSON(t, e.Keys["risk-viewer"], "/budgets", &list)
	if b := list.Items[0]; b.SpentUUSD != 5_250_000 || b.Enforcement != "alert" || b.ForecastUUSD <= b.SpentUUSD {
		t.Errorf("budget = %+v; want $5.25 spent this month, alert only, a larger forecast", b)
	}
	page := e.portal(t, e.signIn(t, "finance@example.com"), http.MethodGet, "/chargeback", nil)
	if !strings.Contains(page.String(), `data-budget="risk"`) || !strings.Contains(page.String(), "52.5%") {
		t.Errorf("chargeback page lacks the risk budget at 52.5%%:\n%.4000s", page)
	}
}

// TestAdviceAPI: the risk endpoint's whole GPU, idle in utilisation and
// memory, gets MIG advice, shown to risk on the API and on the endpoint
// page and to no other team.
func TestAdviceAPI(t *testing.T) {
	t.Parallel()
	e, _ := newChargebackEnv(t)
	var risk adviceBody
	e.getJSON(t, e.Keys["risk-viewer"], "/chargeback/advice", &risk)
	if len(risk.Items) != 1 || risk.Items[0].Kind != chargeback.AdviceMIG || risk.Items[0].Endpoint != "risk-endpoint" ||
		risk.Items[0].SuggestedProfile != "mig-1g.10gb" {
		t.Errorf("risk advice = %+v; want mig-1g.10gb for risk-endpoint", risk.Items)
	}
	var search adviceBody
	e.getJSON(t, e.Keys["search-admin"], "/chargeback/advice?endpoint=risk-endpoint", &search)
	if len(search.Items) != 0 {
		t.Errorf("search admin sees advice %+v on risk's endpoint", search.Items)
	}
	page := e.portal(t, e.signIn(t, "risk-viewer@example.com"), http.MethodGet, "/endpoints/risk-endpoint", nil)
	if !strings.Contains(page.String(), `id="advice"`) || !strings.Contains(page.String(), "mig-1g.10gb fits") {
		t.Errorf("endpoint page lacks the advice:\n%.3000s", page)
	}
}

// TestPortalCostRates: a platform admin sees the history with the rates in
// force and the form; a back-dated rate is refused on its field; finance
// and a viewer see the history without the form and cannot post.
func TestPortalCostRates(t *testing.T) {
	t.Parallel()
	e, _ := newChargebackEnv(t)
	adm := e.signIn(t, "admin@example.com")
	page := e.portal(t, adm, http.MethodGet, "/cost-rates", nil)
	if body := page.String(); page.status != http.StatusOK || !strings.Contains(body, `id="rate-form"`) ||
		strings.Count(body, `<span class="pill">in force</span>`) != 13 || !strings.Contains(body, "$3.500000") {
		t.Errorf("admin cost-rates page = %d, want the form and 13 rates in force:\n%.3000s", page.status, body)
	}
	bad := e.portal(t, adm, http.MethodPost, "/cost-rates", formPayload(url.Values{"csrf": {adm.csrf}, "gpu_type": {"A100-80GB"}, "profile": {"full"},
		"usd_per_hour": {"3.9"}, "effective_from": {"2020-01-01T00:00:00Z"}}))
	if bad.status != http.StatusUnprocessableEntity || !strings.Contains(bad.String(), `data-field="effective_from"`) {
		t.Errorf("back-dated rate = %d; want 422 with the error at effective_from:\n%.3000s", bad.status, bad)
	}
	for _, user := range []string{"finance@example.com", "risk-viewer@example.com"} {
		u := e.signIn(t, user)
		if p := e.portal(t, u, http.MethodGet, "/cost-rates", nil); p.status != http.StatusOK || strings.Contains(p.String(), `id="rate-form"`) ||
			!strings.Contains(p.String(), `id="rates-read-only"`) {
			t.Errorf("%s cost-rates page = %d, shows the form: %v", user, p.status, strings.Contains(p.String(), `id="rate-form"`))
		}
		if p := e.portal(t, u, http.MethodPost, "/cost-rates", formPayload(url.Values{"csrf": {u.csrf}, "gpu_type": {"A100-80GB"},
			"profile": {"full"}, "usd_per_hour": {"3.9"}, "effective_from": {"2099-01-01T00:00:00Z"}})); p.status != http.StatusForbidden {
			t.Errorf("%s POST /cost-rates = %d, want 403", user, p.status)
		}
	}
}

func TestParseUSD(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]int64{"3.50": 3_500_000, "$0.000001": 1, "12": 12_000_000, " 1.5 ": 1_500_000} {
		if got, ok := parseUSD(in); !ok || got != want {
			t.Errorf("parseUSD(%q) = %d, %v; want %d", in, got, ok, want)
		}
	}
	for _, in := range []string{"", "-1", "1.0000001", "abc", "1e3", ".5", "+2"} {
		if got, ok := parseUSD(in); ok {
			t.Errorf("parseUSD(%q) = %d, ok; want refused", in, got)
		}
	}
}

// TestPortalBudgetForm: a risk admin sets the team's budget from the
// chargeback page and sees it listed; the form offers only teams the user
// administers.
func TestPortalBudgetForm(t *testing.T) {
	t.Parallel()
	e, _ := newChargebackEnv(t)
	admin := e.signIn(t, "risk-admin@example.com")
	page := e.portal(t, admin, http.MethodGet, "/chargeback", nil)
	if !strings.Contains(page.String(), `<option value="risk">`) || strings.Contains(page.String(), `<option value="search">`) {
		t.Errorf("budget form teams wrong:\n%.4000s", page)
	}
	r := e.portal(t, admin, http.MethodPost, "/budgets", formPayload(url.Values{"csrf": {admin.csrf}, "team": {"risk"}, "monthly_usd": {"10"},
		"enforcement": {"block"}}))
	if r.status != http.StatusSeeOther {
		t.Fatalf("POST /budgets = %d %s; want 303", r.status, r)
	}
	page = e.portal(t, admin, http.MethodGet, "/chargeback", nil)
	if !strings.Contains(page.String(), `data-budget="risk"`) || !strings.Contains(page.String(), "$10.00") || !strings.Contains(page.String(), "block") {
		t.Errorf("page lacks the new budget:\n%.4000s", page)
	}
	if v := e.portal(t, e.signIn(t, "risk-viewer@example.com"), http.MethodGet, "/chargeback", nil); strings.Contains(v.String(), `id="budget-form"`) {
		t.Error("a viewer is offered the budget form")
	}
}
