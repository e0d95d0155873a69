package bench

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"modelplane/auth"
	"modelplane/chargeback"
)

// ChargebackResult is what `modelplane bench chargeback` prints.
type ChargebackResult struct {
	Name string `json:"name"`
	// MonthReportMs is the p95 over monthRuns (40) of a month's report by team
	// and endpoint over the 2,000-GPU fleet, its days sealed (read from the
	// daily table, as every day older than chargeback.SealAfter is).
	MonthReportMs float64 `json:"month_report_ms"`
	// MonthReportHourlyMs is the same report before sealing, summing the
	// hourly rollup's 1.5 million rows.
	MonthReportHourlyMs float64 `json:"month_report_hourly_ms"`
	// SealSeconds is how long sealing the month's 31 days took.
	SealSeconds float64 `json:"seal_seconds"`
	// RawDayDrilldownMs is the p95 of one team's endpoints and versions
	// over one day, read from the raw per-second rows.
	RawDayDrilldownMs float64 `json:"raw_day_drilldown_ms"`
	// RollupSpeedup is the raw day's report by team and endpoint read from
	// raw rows, over the same report read from the rollup (medians).
	RollupSpeedup float64 `json:"rollup_speedup"`
	// TotalsEqual: the month's total is the generated seconds' exact sum,
	// sealed or not (and every row the same both ways), and the raw day's
	// rows and total are the same from raw rows and from the rollup.
	TotalsEqual bool `json:"totals_equal"`

	MonthGPUs       int             `json:"month_gpus"`
	MonthRollupRows int64           `json:"month_rollup_rows"`
	RawGPUs         int             `json:"raw_gpus"`
	RawRows         int64           `json:"raw_rows"`
	RawDayFromRawMs float64         `json:"raw_day_from_raw_ms"`
	RawDayRollupMs  float64         `json:"raw_day_from_rollup_ms"`
	MonthTotalUUSD  int64           `json:"month_total_uusd"`
	LoadSeconds     float64         `json:"load_seconds"`
	TargetsMet      map[string]bool `json:"targets_met"`
}

// The generated data: a month of 2,000 GPUs in the hourly rollup, read
// 40 times, and a day of RawGPUs GPUs in raw rows, read 5 times from raw
// rows (40 from the rollup). The fleet has 200 endpoints.
const (
	monthGPUs      = 2000
	monthEndpoints = 200
	monthRuns      = 40
	rawRuns        = 5
)

var (
	monthStart = time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC)
	monthEnd   = monthStart.AddDate(0, 1, 0)
	rawDay     = time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC)
)

// monthHours is the rollup month's length in hours.
func monthHours() int { return int(monthEnd.Sub(monthStart) / time.Hour) }

func runChargeback(ctx context.Context, cfg Config, out io.Writer) error {
	res, err := measureChargeback(ctx, cfg)
	if err != nil {
		return err
	}
	return emit(out, cfg.JSON, res, "chargeback: month report p95 %.1f ms sealed, %.1f ms from the hourly rollup (%d GPUs, %d rollup rows), raw day drill-down p95 %.1f ms (%d GPUs, %d rows), rollup %.0fx faster than raw, totals equal %v\n",
		res.MonthReportMs, res.MonthReportHourlyMs, res.MonthGPUs, res.MonthRollupRows, res.RawDayDrilldownMs, res.RawGPUs, res.RawRows, res.RollupSpeedup, res.TotalsEqual)
}

// The generated fleet, the same in the rollup month and the raw day: GPU g
// serves team g%20, endpoint g%200 (version 1 or 2 by g/200), is an A100
// for even g and an H100 for odd, and one GPU in five is a MIG 1g.10gb
// slice. The rates have remainders so that rounding is exercised.
const (
	teamExpr     = "concat('team-', toString(g % 20))"
	endpointExpr = "concat('ep-', toString(g % 200))"
	modelExpr    = "concat('model-', toString(g % 200))"
	versionExpr  = "concat('v', toString(intDiv(g, 200) % 2 + 1))"
	typeExpr     = "if(g % 2 = 0, 'A100-80GB', 'H100-80GB')"
	profileExpr  = "if(g % 5 = 0, 'mig-1g.10gb', 'full')"
	rateExpr     = "toUInt64(multiIf(g % 5 = 0, 500003, g % 2 = 0, 3500001, 5500011))"
)

// rate is rateExpr in Go, for the expected totals.
func rate(g int) int64 {
	switch {
	case g%5 == 0:
		return 500_003
	case g%2 == 0:
		return 3_500_001
	}
	return 5_500_011
}

// measureChargeback starts a private ClickHouse, writes a month of the
// 2,000-GPU fleet straight into the hourly rollup (one row per GPU and
// hour, as the view would hold after its merges) and a day of the first
// RawGPUs GPUs into the raw table (which fills the rollup for that day
// through the view), both generated inside ClickHouse, then times reports:
// the month from the hourly rollup, then sealed (as a month is once its
// days are older than chargeback.SealAfter), the raw day from raw rows and
// from the rollup.
func measureChargeback(ctx context.Context, cfg Config) (ChargebackResult, error) {
	rawGPUs := cfg.RawGPUs
	if rawGPUs <= 0 {
		rawGPUs = 500
	}
	res := ChargebackResult{Name: "chargeback", MonthGPUs: monthGPUs, RawGPUs: rawGPUs}
	s, err := newScratch("mp-bench-chargeback-")
	if err != nil {
		return res, err
	}
	defer s.close()
	ch, err := s.clickhouse(ctx)
	if err != nil {
		return res, err
	}
	load := time.Now()
	if res.MonthRollupRows, err = generateMonth(ctx, ch); err != nil {
		return res, fmt.Errorf("generate the rollup month: %w", err)
	}
	if res.RawRows, err = generateRawDay(ctx, ch, rawGPUs); err != nil {
		return res, fmt.Errorf("generate the raw day: %w", err)
	}
	res.LoadSeconds = time.Since(load).Seconds()

	// A day after the raw day has closed: reports of closed periods do not
	// look for ingest lag (chargeback.LagWindow), so both reads time only
	// the sums.
	r := reports{svc: chargeback.New(ch, nil, newStandingClock(rawDay.Add(48*time.Hour))),
		caller: auth.System("bench")}
	monthOK, err := r.month(ctx, ch, &res)
	if err != nil {
		return res, err
	}
	dayOK, err := r.day(ctx, rawGPUs, &res)
	if err != nil {
		return res, err
	}
	res.TotalsEqual = monthOK && dayOK
	res.TargetsMet = map[string]bool{
		"month_report_p95_le_100ms": res.MonthReportMs <= 100,
		"rollup_speedup_ge_100x":    res.RollupSpeedup >= 100,
		"totals_equal":              res.TotalsEqual,
	}
	return res, nil
}

// generateMonth writes the month into the hourly rollup and returns its
// rows.
func generateMonth(ctx context.Context, ch driver.Conn) (int64, error) {
	rows := int64(monthHours() * monthGPUs)
	return rows, ch.Exec(ctx, fmt.Sprintf(`INSERT INTO gpu_usage_hourly (hour, team, endpoint, model, version, replica, gpu_type, profile,
		gpu_seconds, cost_uusd_x3600, requests, util_pct_sum, memory_mb_sum)
		SELECT toDateTime(%d) + 3600 * h, %s, %s, %s, %s, concat('r-', toString(g)), %s, %s,
			toUInt64(3600), 3600 * %s, toUInt64(3600 * (g %% 7)), toFloat64(3600 * (g %% 100)), toUInt64(3600 * 20000)
		FROM (SELECT intDiv(number, %d) AS h, number %% %d AS g FROM system.numbers LIMIT %d)`,
		monthStart.Unix(), teamExpr, endpointExpr, modelExpr, versionExpr, typeExpr, profileExpr, rateExpr,
		monthGPUs, monthGPUs, rows))
}

// generateRawDay writes the raw day of gpus GPUs, one row per GPU and
// second, and returns its rows.
func generateRawDay(ctx context.Context, ch driver.Conn, gpus int) (int64, error) {
	rows := int64(86400 * gpus)
	return rows, ch.Exec(ctx, fmt.Sprintf(`INSERT INTO gpu_usage (ts, node, gpu, slice, gpu_type, profile, team, endpoint, model, version, replica,
		util_pct, memory_mb, requests, rate_uusd_per_hour, batch_id, row_idx)
		SELECT toDateTime(%d) + s, concat('node-', toString(intDiv(g, 8))), toUInt16(g %% 8), toUInt16(0), %s, %s, %s, %s, %s, %s,
			concat('r-', toString(g)), toFloat32(g %% 100), toUInt64(20000), toUInt64(g %% 7), %s, concat('b-', toString(s)), toUInt32(g)
		FROM (SELECT intDiv(number, %d) AS s, number %% %d AS g FROM system.numbers LIMIT %d)`,
		rawDay.Unix(), typeExpr, profileExpr, teamExpr, endpointExpr, modelExpr, versionExpr, rateExpr,
		gpus, gpus, rows))
}

// reports times the cost reports finance reads.
type reports struct {
	svc    *chargeback.Service
	caller *auth.Principal
}

var byTeamEndpoint = []chargeback.Dimension{chargeback.DimTeam, chargeback.DimEndpoint}

// month times the month's report from the hourly rollup, seals the month
// and times it again, and reports whether both readings hold the
// generator's exact total and the same rows.
func (r reports) month(ctx context.Context, ch driver.Conn, res *ChargebackResult) (bool, error) {
	hours := monthHours()
	var wantX int64
	for g := range monthGPUs {
		wantX += int64(hours) * 3600 * rate(g)
	}
	month := chargeback.Query{From: monthStart, To: monthEnd, GroupBy: byTeamEndpoint}
	hourlyTimes, hourlyRep, err := r.time(ctx, month, monthRuns/4)
	if err != nil {
		return false, err
	}
	res.MonthReportHourlyMs = percentile(hourlyTimes, 0.95)
	sealStart := time.Now()
	sealed, err := chargeback.NewSealer(ch, nil, newStandingClock(monthEnd.Add(chargeback.SealAfter+24*time.Hour))).Seal(ctx)
	if err != nil {
		return false, err
	}
	res.SealSeconds = time.Since(sealStart).Seconds()
	monthTimes, monthRep, err := r.time(ctx, month, monthRuns)
	if err != nil {
		return false, err
	}
	res.MonthReportMs = percentile(monthTimes, 0.95)
	res.MonthTotalUUSD = monthRep.Total.CostMicroUSD
	ok := sealed == hours/24 && len(monthRep.Rows) == monthEndpoints && len(hourlyRep.Rows) == monthEndpoints
	for _, rep := range []*chargeback.Report{hourlyRep, monthRep} {
		ok = ok && rep.Total.CostX3600 == wantX && rep.Total.CostMicroUSD == (wantX+1800)/3600
	}
	return ok && sameRows(monthRep.Rows, hourlyRep.Rows), nil
}

// day times one team's drill-down over the raw day from raw rows and the
// day's report from raw rows and from the rollup, and reports whether
// both hold the generator's exact total and the same rows.
func (r reports) day(ctx context.Context, gpus int, res *ChargebackResult) (bool, error) {
	day := chargeback.Query{From: rawDay, To: rawDay.Add(24 * time.Hour), GroupBy: byTeamEndpoint}
	drill := chargeback.Query{From: day.From, To: day.To, Team: "team-3",
		GroupBy: []chargeback.Dimension{chargeback.DimEndpoint, chargeback.DimVersion}, Source: chargeback.SourceRaw}
	drillTimes, _, err := r.time(ctx, drill, rawRuns)
	if err != nil {
		return false, err
	}
	res.RawDayDrilldownMs = percentile(drillTimes, 0.95)
	rawQ := day
	rawQ.Source = chargeback.SourceRaw
	rawTimes, rawRep, err := r.time(ctx, rawQ, rawRuns)
	if err != nil {
		return false, err
	}
	rollTimes, rollRep, err := r.time(ctx, day, monthRuns)
	if err != nil {
		return false, err
	}
	rawMed, rollMed := quantile(rawTimes, 0.5), quantile(rollTimes, 0.5)
	res.RawDayFromRawMs = ms(rawMed)
	res.RawDayRollupMs = ms(rollMed)
	if rollMed > 0 {
		res.RollupSpeedup = float64(rawMed) / float64(rollMed)
	}
	var want int64
	for g := range gpus {
		want += 86400 * rate(g)
	}
	ok := rawRep.Total.CostX3600 == want && rollRep.Total.CostX3600 == want &&
		rawRep.Total.CostMicroUSD == rollRep.Total.CostMicroUSD && rawRep.Total.GPUSeconds == rollRep.Total.GPUSeconds
	return ok && sameRows(rawRep.Rows, rollRep.Rows), nil
}

// sameRows reports whether a and b hold the same keys with the same
// seconds, costs and requests, in the same order.
func sameRows(a, b []chargeback.Row) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if x.Key != y.Key || x.GPUSeconds != y.GPUSeconds || x.CostX3600 != y.CostX3600 || x.CostMicroUSD != y.CostMicroUSD || x.Requests != y.Requests {
			return false
		}
	}
	return true
}

// time runs q n times after one warm-up and returns the durations and the
// last report.
func (r reports) time(ctx context.Context, q chargeback.Query, n int) ([]time.Duration, *chargeback.Report, error) {
	rep, err := r.svc.Report(ctx, r.caller, q)
	if err != nil {
		return nil, nil, fmt.Errorf("chargeback bench report: %w", err)
	}
	out := make([]time.Duration, 0, n)
	for range n {
		start := time.Now()
		if rep, err = r.svc.Report(ctx, r.caller, q); err != nil {
			return nil, nil, fmt.Errorf("chargeback bench report: %w", err)
		}
		out = append(out, time.Since(start))
	}
	return out, rep, nil
}
