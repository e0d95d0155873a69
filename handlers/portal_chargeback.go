package handlers

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"modelplane/auth"
	"modelplane/billing"
	"modelplane/chargeback"
	"modelplane/field"
	"modelplane/money"
	"modelplane/web"
)

// chargebackView is a portal chargeback request, parsed: the query for the
// service and what the form shows back.
type chargebackView struct {
	q                      chargeback.Query
	period, fromDay, toDay string
	groupBy                []string
}

// values are the request's parameters, for links that keep them.
func (v chargebackView) values() url.Values {
	out := url.Values{"period": {v.period}}
	if v.period == "custom" {
		out.Set("from", v.fromDay)
		out.Set("to", v.toDay)
	}
	if v.q.Team != "" {
		out.Set("team", v.q.Team)
	}
	if v.q.Endpoint != "" {
		out.Set("endpoint", v.q.Endpoint)
	}
	if v.q.Graph != "" {
		out.Set("graph", v.q.Graph)
	}
	for _, g := range v.groupBy {
		out.Add("group_by", g)
	}
	return out
}

// parseChargebackView reads the period (this month, last month, or custom
// days with the last one included), the grouping (default: one level below
// the drill-down: teams, a team's endpoints, an endpoint's versions) and
// the drill-down filters.
func parseChargebackView(r *http.Request, now time.Time) (chargebackView, error) {
	qs := r.URL.Query()
	v := chargebackView{period: qs.Get("period")}
	v.q.Team, v.q.Endpoint, v.q.Graph = qs.Get("team"), qs.Get("endpoint"), qs.Get("graph")
	switch v.period {
	case "last":
		v.q.From, v.q.To = chargeback.LastMonth(now)
	case "custom":
		from, err := chargeback.ParseTime("from", qs.Get("from"))
		if err != nil {
			return v, err
		}
		to, err := chargeback.ParseTime("to", qs.Get("to"))
		if err != nil {
			return v, err
		}
		v.q.From, v.q.To = from.Truncate(24*time.Hour), to.Truncate(24*time.Hour).Add(24*time.Hour)
	default:
		v.period = "this"
		v.q.From, v.q.To = chargeback.ThisMonth(now)
		if !v.q.To.After(v.q.From) { // the first second of a month
			v.q.To = v.q.From.Add(time.Second)
		}
	}
	v.fromDay = v.q.From.Format(time.DateOnly)
	v.toDay = v.q.To.Add(-time.Second).Format(time.DateOnly)
	by := strings.Join(qs["group_by"], ",")
	if by == "" {
		switch {
		case v.q.Endpoint != "":
			by = "version"
		case v.q.Team != "":
			by = "endpoint"
		default:
			by = "team"
		}
	}
	dims, err := chargeback.ParseGroupBy(by)
	if err != nil {
		return v, err
	}
	v.q.GroupBy = dims
	for _, d := range dims {
		v.groupBy = append(v.groupBy, string(d))
	}
	return v, nil
}

// portalChargeback is the chargeback page. ClickHouse behind or down is
// said on the page, never an error page: finance still sees what is there.
func (s *Server) portalChargeback(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	f := pageFrame(r)
	p := f.user
	props := web.ChargebackProps{Layout: f.layout(w, "Chargeback", "chargeback")}
	for _, d := range chargeback.Dimensions {
		props.Dimensions = append(props.Dimensions, string(d))
	}
	v, err := parseChargebackView(r, s.Clock.Now())
	props.Period, props.From, props.To, props.GroupBy = v.period, v.fromDay, v.toDay, v.groupBy
	props.Team, props.Endpoint = v.q.Team, v.q.Endpoint
	if err != nil {
		var verrs field.Errors
		if !errors.As(err, &verrs) {
			s.portalError(w, r, err)
			return
		}
		props.Error = verrs.Error()
		s.render(w, r, http.StatusBadRequest, web.ChargebackPage(props))
		return
	}
	props.PeriodLabel = fmt.Sprintf("%s to %s (UTC)", v.fromDay, v.toDay)
	props.Crumbs = chargebackCrumbs(v)
	// The page's sections are read at once, each its own ClickHouse
	// query: under load the page then waits for the slowest, not for the
	// sum of six queues (bench pages: the slowest route at p99). Each
	// goroutine fills fields of its own.
	var sections sync.WaitGroup
	sections.Go(func() { s.budgetProps(r, &props) })
	sections.Go(func() { props.Advice = s.adviceLines(r, v.q.Endpoint) })
	if s.Chargeback == nil {
		sections.Wait()
		props.Unavailable = "Chargeback is unavailable: no usage store is configured."
		s.render(w, r, http.StatusOK, web.ChargebackPage(props))
		return
	}
	stack := chargeback.DimTeam
	switch {
	case v.q.Endpoint != "":
		stack = chargeback.DimVersion
	case v.q.Team != "":
		stack = chargeback.DimEndpoint
	}
	topQ := v.q
	topQ.GroupBy = []chargeback.Dimension{chargeback.DimEndpoint}
	var rep, top *chargeback.Report
	var daily *chargeback.Daily
	var repErr, dailyErr, topErr error
	sections.Go(func() { rep, repErr = s.Chargeback.Report(ctx, p, v.q) })
	sections.Go(func() { daily, dailyErr = s.Chargeback.Daily(ctx, p, v.q, stack) })
	sections.Go(func() { top, topErr = s.Chargeback.Report(ctx, p, topQ) })
	sections.Wait()
	unavailable := func(err error) {
		s.Log.ErrorContext(ctx, "chargeback report", slog.String("error", err.Error()), slog.String("request_id", requestID(ctx)))
		props.Unavailable = "Usage data cannot be read right now (the usage store is not answering); try again in a minute."
		s.render(w, r, http.StatusOK, web.ChargebackPage(props))
	}
	if repErr != nil {
		var verrs field.Errors
		if errors.As(repErr, &verrs) {
			props.Error = verrs.Error()
			s.render(w, r, http.StatusBadRequest, web.ChargebackPage(props))
			return
		}
		unavailable(repErr)
		return
	}
	if err := cmp.Or(dailyErr, topErr); err != nil {
		unavailable(err)
		return
	}
	props.RatesVersion, props.Delayed = rep.RatesVersion, rep.Delayed
	csv := v.values()
	props.CSVURL = "/chargeback/csv?" + csv.Encode()
	for _, d := range rep.GroupBy {
		props.Columns = append(props.Columns, string(d))
	}
	live := s.liveEndpoints(r, rep)
	for _, row := range rep.Rows {
		rv := chargebackRowView(row, rep.GroupBy, v)
		team := row.Team
		if team == "" {
			team = v.q.Team // a drill-down into one team groups by endpoint alone
		}
		if live != nil && row.Endpoint != "" && team != "" && !live[team+"/"+row.Endpoint] {
			rv.Deleted = true
		}
		props.Rows = append(props.Rows, rv)
	}
	props.Total = chargebackRowView(rep.Total, nil, v)
	if len(rep.GroupBy) > 0 {
		props.Total.Cells = []web.Link{{Label: "Total"}}
		for range rep.GroupBy[1:] {
			props.Total.Cells = append(props.Total.Cells, web.Link{})
		}
	}
	props.Daily.Days = daily.Days
	for _, ser := range daily.Series {
		line := web.ChartLine{Label: teamLabel(stack, ser.Label), Values: make([]float64, len(ser.CostX3600))}
		for i, x := range ser.CostX3600 {
			line.Values[i] = float64(x) / 3600 / 1e6
		}
		props.Daily.Series = append(props.Daily.Series, line)
	}
	sort.SliceStable(top.Rows, func(i, j int) bool { return top.Rows[i].CostMicroUSD > top.Rows[j].CostMicroUSD })
	for _, row := range top.Rows {
		if row.Endpoint == "" { // unallocated GPU time is not an endpoint
			continue
		}
		if len(props.Top.Bars) == 10 {
			break
		}
		props.Top.Bars = append(props.Top.Bars, web.Bar{Label: row.Endpoint, Value: float64(row.CostMicroUSD), Text: "$" + money.Dollars(row.CostMicroUSD)})
	}
	s.render(w, r, http.StatusOK, web.ChargebackPage(props))
}

// liveEndpoints is "team/name" of the endpoints that exist now among those
// the user reads usage of, so rows of deleted endpoints can be marked; nil
// when the report does not group by team and endpoint, or the endpoints
// cannot be read (then nothing is marked rather than everything).
func (s *Server) liveEndpoints(r *http.Request, rep *chargeback.Report) map[string]bool {
	if s.Endpoints == nil || !slices.Contains(rep.GroupBy, chargeback.DimEndpoint) {
		return nil
	}
	names, err := s.Endpoints.Names(r.Context(), pageFrame(r).user)
	if err != nil {
		s.Log.WarnContext(r.Context(), "chargeback endpoints", slog.String("error", err.Error()))
		return nil
	}
	return names
}

// groupedInt writes n with thousands separators ("1,234,567").
func groupedInt(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// hoursOf writes seconds as hours to two places, half up, with thousands
// separators ("1,234.57"). Seconds are not negative.
func hoursOf(seconds int64) string {
	centi := (seconds*100 + 1800) / 3600
	return fmt.Sprintf("%s.%02d", groupedInt(centi/100), centi%100)
}

// unitDollars writes a per-unit cost (per 1k requests, per 1M tokens) in
// dollars to four places, half up, with thousands separators: cents hide
// what a thousand cheap requests cost.
func unitDollars(uusd int64) string {
	v := (uusd + 50) / 100 // ten-thousandths of a dollar
	return fmt.Sprintf("%s.%04d", groupedInt(v/10_000), v%10_000)
}

// adviceLines is the right-sizing advice for one endpoint ("" for all the
// user sees) as sentences; advice that cannot be read is logged and left
// out, never an error page.
func (s *Server) adviceLines(r *http.Request, endpoint string) []string {
	if s.Advisor == nil {
		return nil
	}
	ctx := r.Context()
	adv, err := s.Advisor.Advise(ctx, pageFrame(r).user, endpoint)
	if err != nil {
		s.Log.WarnContext(ctx, "right-sizing advice", slog.String("error", err.Error()))
		return nil
	}
	out := make([]string, len(adv))
	for i, a := range adv {
		out[i] = a.Summary
	}
	return out
}

// graphCost is graph endpoint graph's cost this month by step endpoint
// (chargeback's graph split), or nil when it cannot be read: the failure
// is logged and the page shows the rest.
func (s *Server) graphCost(r *http.Request, graph string) *web.GraphCostView {
	if s.Chargeback == nil {
		return nil
	}
	ctx := r.Context()
	from, to := chargeback.ThisMonth(s.Clock.Now())
	if !to.After(from) { // the first second of a month
		to = from.Add(time.Second)
	}
	rep, err := s.Chargeback.Report(ctx, pageFrame(r).user, chargeback.Query{From: from, To: to,
		GroupBy: []chargeback.Dimension{chargeback.DimEndpoint}, Graph: graph})
	if err != nil {
		s.Log.WarnContext(ctx, "graph cost", slog.String("error", err.Error()))
		return nil
	}
	csv := url.Values{"period": {"this"}, "graph": {graph}, "group_by": {"endpoint"}}
	out := &web.GraphCostView{Period: "this month (" + from.Format("January 2006") + ")", Total: "$" + money.Dollars(rep.Total.CostMicroUSD),
		CSV: "/chargeback/csv?" + csv.Encode()}
	for _, row := range rep.Rows {
		out.Steps = append(out.Steps, web.GraphStepCost{Endpoint: row.Endpoint, Requests: groupedInt(row.Requests), Cost: "$" + money.Dollars(row.CostMicroUSD)})
	}
	return out
}

// budgetProps fills the budget section; a failure to read budgets is
// logged and leaves the section empty rather than failing the page.
func (s *Server) budgetProps(r *http.Request, props *web.ChargebackProps) {
	if s.Budgets == nil {
		return
	}
	ctx := r.Context()
	p := pageFrame(r).user
	if p.PlatformAdmin() {
		props.BudgetTeams = props.Layout.Teams
	} else {
		for _, m := range p.Teams {
			if m.Role == auth.RoleAdmin {
				props.BudgetTeams = append(props.BudgetTeams, m.Team)
			}
		}
	}
	bs, err := s.Budgets.List(ctx, p)
	if err == nil {
		var alerts []chargeback.Alert
		if alerts, err = s.Budgets.Alerts(ctx, p); err == nil {
			for _, a := range alerts {
				props.Alerts = append(props.Alerts, fmt.Sprintf("%s passed %d%% of its budget on %s: $%s of $%s spent, forecast $%s.",
					chargeback.BudgetName(a.Team, a.Endpoint), a.ThresholdPct, a.At.Format(time.DateOnly), money.Dollars(a.SpentUUSD), money.Dollars(a.BudgetUUSD), money.Dollars(a.ForecastUUSD)))
			}
		}
	}
	if err != nil {
		s.Log.WarnContext(ctx, "chargeback budgets", slog.String("error", err.Error()))
		return
	}
	for _, b := range bs {
		props.Budgets = append(props.Budgets, web.BudgetView{Scope: chargeback.BudgetName(b.Team, b.Endpoint), Budget: "$" + money.Dollars(b.MonthlyUUSD),
			Spent: "$" + money.Dollars(b.SpentUUSD), Forecast: "$" + money.Dollars(b.ForecastUUSD), Pct: fmt.Sprintf("%.1f%%", b.SpentPct),
			Enforcement: b.Enforcement, Over: b.SpentUUSD >= b.MonthlyUUSD})
	}
}

// portalChargebackCSV downloads what the page shows as CSV.
func (s *Server) portalChargebackCSV(w http.ResponseWriter, r *http.Request) {
	v, err := parseChargebackView(r, s.Clock.Now())
	if err != nil {
		s.portalError(w, r, err)
		return
	}
	if s.Chargeback == nil {
		s.renderError(w, r, http.StatusServiceUnavailable, "chargeback is unavailable: no usage store is configured")
		return
	}
	rep, err := s.Chargeback.Report(r.Context(), pageFrame(r).user, v.q)
	if err != nil {
		s.portalError(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "text/csv; charset=utf-8; header=present")
	w.Header().Set("Content-Disposition", `attachment; filename="`+csvFilename(rep)+`"`)
	if err := chargeback.WriteCSV(w, rep); err != nil {
		s.Log.ErrorContext(r.Context(), "chargeback csv", slog.String("error", err.Error()))
	}
}

// teamLabel names unallocated GPU time where a team would be, and calls
// from outside a graph where a graph would be.
func teamLabel(d chargeback.Dimension, v string) string {
	switch {
	case d == chargeback.DimTeam && v == "":
		return chargeback.Unallocated
	case d == chargeback.DimGraph && v == "":
		return "(no graph)"
	}
	return v
}

// chargebackRowView fills one table row; a team cell drills into the
// team's endpoints, an endpoint cell into its versions.
func chargebackRowView(row chargeback.Row, by []chargeback.Dimension, v chargebackView) web.ChargebackRowView {
	out := web.ChargebackRowView{GPUHours: hoursOf(row.GPUOnlySeconds()), CPUHours: hoursOf(row.CPUCoreSeconds),
		Cost: money.Dollars(row.CostMicroUSD), Requests: groupedInt(row.Requests), Util: "not measured"}
	if pct, ok := row.AvgGPUUtilPct(); ok {
		out.Util = fmt.Sprintf("%.1f%%", pct)
	}
	if c, ok := row.CostPer1kRequestsMicroUSD(); ok {
		out.Per1k = "$" + unitDollars(c)
	}
	if c, ok := row.CostPer1MTokensMicroUSD(); ok {
		out.Per1M = "$" + unitDollars(c)
	}
	for _, d := range by {
		val := row.Get(d)
		cell := web.Link{Label: teamLabel(d, val)}
		drill := url.Values{"period": {v.period}}
		if v.period == "custom" {
			drill.Set("from", v.fromDay)
			drill.Set("to", v.toDay)
		}
		switch {
		case d == chargeback.DimTeam && val != "" && v.q.Team == "":
			drill.Set("team", val)
			cell.URL = "/chargeback?" + drill.Encode()
		case d == chargeback.DimEndpoint && val != "" && v.q.Endpoint == "":
			team := v.q.Team
			if team == "" {
				team = row.Team
			}
			if team != "" {
				drill.Set("team", team)
			}
			drill.Set("endpoint", val)
			cell.URL = "/chargeback?" + drill.Encode()
		case d == chargeback.DimGraph && val != "" && v.q.Graph == "":
			// A graph drills into its cost by step.
			drill.Set("graph", val)
			drill.Set("group_by", "endpoint")
			cell.URL = "/chargeback?" + drill.Encode()
		}
		out.Cells = append(out.Cells, cell)
	}
	return out
}

// chargebackCrumbs lead from a drill-down back up: all teams → team →
// endpoint.
func chargebackCrumbs(v chargebackView) []web.Link {
	if v.q.Team == "" && v.q.Endpoint == "" {
		return nil
	}
	base := url.Values{"period": {v.period}}
	if v.period == "custom" {
		base.Set("from", v.fromDay)
		base.Set("to", v.toDay)
	}
	out := []web.Link{{Label: "All teams", URL: "/chargeback?" + base.Encode()}}
	if v.q.Team != "" {
		base.Set("team", v.q.Team)
		out = append(out, web.Link{Label: v.q.Team, URL: "/chargeback?" + base.Encode()})
	}
	if v.q.Endpoint != "" {
		base.Set("endpoint", v.q.Endpoint)
		out = append(out, web.Link{Label: v.q.Endpoint, URL: "/chargeback?" + base.Encode()})
	}
	return out
}

// portalCostRates shows the rate history, with the form for platform
// admins; everyone else reads it.
func (s *Server) portalCostRates(w http.ResponseWriter, r *http.Request) {
	s.renderCostRates(w, r, http.StatusOK, web.CostRatesProps{})
}

func (s *Server) renderCostRates(w http.ResponseWriter, r *http.Request, status int, props web.CostRatesProps) {
	ctx := r.Context()
	rates, err := s.Rates.List(ctx)
	if err != nil {
		s.portalError(w, r, err)
		return
	}
	f := pageFrame(r)
	props.Layout = f.layout(w, "Cost rates", "chargeback")
	props.CanEdit = f.user.PlatformAdmin()
	now := s.Clock.Now()
	table := make([]billing.Rate, 0, len(rates))
	for _, e := range rates {
		table = append(table, billing.Rate{GPUType: e.GPUType, Profile: e.Profile, UUSDPerHour: e.UUSDPerHour, EffectiveFrom: e.EffectiveFrom})
	}
	inForce := billing.NewRates(table)
	for _, e := range rates {
		cur, ok := inForce.At(e.GPUType, e.Profile, now)
		latest := true
		for _, o := range rates {
			if o.GPUType == e.GPUType && o.Profile == e.Profile && !o.EffectiveFrom.After(now) && o.EffectiveFrom.After(e.EffectiveFrom) {
				latest = false
			}
		}
		view := web.CostRateView{GPUType: e.GPUType, Profile: e.Profile, PerHour: "$" + money.USD(e.UUSDPerHour),
			EffectiveFrom: e.EffectiveFrom.Format(time.RFC3339), CreatedBy: e.CreatedBy,
			InForce: ok && cur == e.UUSDPerHour && latest && !e.EffectiveFrom.After(now)}
		if e.CreatedBy == defaultRateAuthor && e.EffectiveFrom.Unix() == 0 {
			// Entered by the migration, in force since the epoch: a time
			// and an author would only puzzle.
			view.EffectiveFrom, view.CreatedBy = "default rate", "–"
		}
		props.Rates = append(props.Rates, view)
	}
	s.render(w, r, status, web.CostRatesPage(props))
}

// defaultRateAuthor is the author the migration gives the default rates
// (migrations/postgres/0002_fleet.sql), effective from the epoch.
const defaultRateAuthor = "default"

// parseUSD reads dollars with at most six decimals as micro-USD.
func parseUSD(s string) (int64, bool) {
	s = strings.TrimPrefix(strings.TrimSpace(s), "$")
	whole, frac, _ := strings.Cut(s, ".")
	if whole == "" || len(frac) > 6 || strings.ContainsAny(whole+frac, "+-") {
		return 0, false
	}
	w, err := strconv.ParseInt(whole, 10, 64)
	if err != nil || w > 1_000_000 {
		return 0, false
	}
	f := int64(0)
	if frac != "" {
		if f, err = strconv.ParseInt(frac+strings.Repeat("0", 6-len(frac)), 10, 64); err != nil {
			return 0, false
		}
	}
	return w*1_000_000 + f, true
}

// portalCostRateCreate enters a rate from the form.
func (s *Server) portalCostRateCreate(w http.ResponseWriter, r *http.Request) {
	if !pageFrame(r).user.PlatformAdmin() {
		s.portalError(w, r, auth.ErrForbidden)
		return
	}
	form := web.CostRateForm{GPUType: r.PostFormValue("gpu_type"), Profile: r.PostFormValue("profile"),
		PerHourUSD: r.PostFormValue("usd_per_hour"), EffectiveFrom: r.PostFormValue("effective_from")}
	errs := web.FieldErrors{}
	uusd, ok := parseUSD(form.PerHourUSD)
	if !ok {
		errs["uusd_per_hour"] = "must be dollars with at most six decimals, e.g. 3.50"
	}
	at, err := time.Parse(time.RFC3339, strings.TrimSpace(form.EffectiveFrom))
	if err != nil {
		errs["effective_from"] = "must be an RFC 3339 time, e.g. 2026-12-01T00:00:00Z"
	}
	if len(errs) == 0 {
		_, err = s.Rates.Create(r.Context(), pageFrame(r).user, billing.Rate{GPUType: form.GPUType, Profile: form.Profile, UUSDPerHour: uusd, EffectiveFrom: at})
		if err == nil {
			redirectFlash(w, r, "/cost-rates", fmt.Sprintf("Rate for %s %s entered.", form.GPUType, form.Profile))
			return
		}
		var verrs field.Errors
		if !errors.As(err, &verrs) {
			s.portalError(w, r, err)
			return
		}
		for _, f := range verrs {
			errs[f.Field] = f.Message
		}
	}
	s.renderCostRates(w, r, http.StatusUnprocessableEntity, web.CostRatesProps{Form: form, Errors: errs})
}

// portalBudgetSet sets a budget from the chargeback page's form.
func (s *Server) portalBudgetSet(w http.ResponseWriter, r *http.Request) {
	if s.Budgets == nil {
		s.renderError(w, r, http.StatusServiceUnavailable, "budgets are unavailable")
		return
	}
	uusd, ok := parseUSD(r.PostFormValue("monthly_usd"))
	if !ok || uusd <= 0 {
		redirectFlash(w, r, "/chargeback", "Budget not set: the monthly budget must be a positive amount of dollars, e.g. 5000.")
		return
	}
	b, err := s.Budgets.Set(r.Context(), pageFrame(r).user, chargeback.BudgetSpec{Team: r.PostFormValue("team"),
		Endpoint: r.PostFormValue("endpoint"), MonthlyUUSD: uusd, Enforcement: r.PostFormValue("enforcement")})
	if err != nil {
		var verrs field.Errors
		if errors.As(err, &verrs) {
			redirectFlash(w, r, "/chargeback", "Budget not set: "+verrs.Error())
			return
		}
		s.portalError(w, r, err)
		return
	}
	redirectFlash(w, r, "/chargeback", fmt.Sprintf("Budget of %s set to $%s a month (%s).", chargeback.BudgetName(b.Team, b.Endpoint), money.Dollars(b.MonthlyUUSD), b.Enforcement))
}
