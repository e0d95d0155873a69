package app

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"modelplane/auth"
	"modelplane/chargeback"
	"modelplane/ingest"
	"modelplane/internal/chproc"
	"modelplane/migrations"
)

// ChargebackBenchResult is what `modelplane bench chargeback` prints.
type ChargebackBenchResult struct {
	Name string `json:"name"`
	// MonthReportMs is the p95 over MonthRuns of a month's report by team
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

const (
	cbMonthGPUs = 2000
	cbTeams     = 20
	cbEndpoints = 200
	cbMonthRuns = 40
	cbRawRuns   = 5
)

var (
	cbMonth  = time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC)
	cbRawDay = time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC)
)

func runBenchChargeback(ctx context.Context, cfg BenchConfig, out io.Writer) error {
	res, err := benchChargeback(ctx, cfg)
	if err != nil {
		return err
	}
	if cfg.JSON {
		return json.NewEncoder(out).Encode(res)
	}
	_, err = fmt.Fprintf(out, "chargeback: month report p95 %.1f ms sealed, %.1f ms from the hourly rollup (%d GPUs, %d rollup rows), raw day drill-down p95 %.1f ms (%d GPUs, %d rows), rollup %.0fx faster than raw, totals equal %v\n",
		res.MonthReportMs, res.MonthReportHourlyMs, res.MonthGPUs, res.MonthRollupRows, res.RawDayDrilldownMs, res.RawGPUs, res.RawRows, res.RollupSpeedup, res.TotalsEqual)
	return err
}

// The generated fleet, the same in the rollup month and the raw day: GPU g
// serves team g%20, endpoint g%200 (version 1 or 2 by g/200), is an A100
// for even g and an H100 for odd, and one GPU in five is a MIG 1g.10gb
// slice. The rates have remainders so that rounding is exercised.
const (
	cbTeamExpr     = "concat('team-', toString(g % 20))"
	cbEndpointExpr = "concat('ep-', toString(g % 200))"
	cbModelExpr    = "concat('model-', toString(g % 200))"
	cbVersionExpr  = "concat('v', toString(intDiv(g, 200) % 2 + 1))"
	cbTypeExpr     = "if(g % 2 = 0, 'A100-80GB', 'H100-80GB')"
	cbProfileExpr  = "if(g % 5 = 0, 'mig-1g.10gb', 'full')"
	cbRateExpr     = "toUInt64(multiIf(g % 5 = 0, 500003, g % 2 = 0, 3500001, 5500011))"
)

// cbRate is cbRateExpr in Go, for the expected total.
func cbRate(g int) int64 {
	switch {
	case g%5 == 0:
		return 500_003
	case g%2 == 0:
		return 3_500_001
	}
	return 5_500_011
}

// benchChargeback starts a private ClickHouse, writes a month of the
// 2,000-GPU fleet straight into the hourly rollup (one row per GPU and
// hour, as the view would hold after its merges) and a day of the first
// RawGPUs GPUs into the raw table (which fills the rollup for that day
// through the view), both generated inside ClickHouse, then times reports:
// the month from the hourly rollup, then sealed (as a month is once its
// days are older than chargeback.SealAfter), the raw day from raw rows and
// from the rollup.
func benchChargeback(ctx context.Context, cfg BenchConfig) (ChargebackBenchResult, error) {
	rawGPUs := cfg.RawGPUs
	if rawGPUs <= 0 {
		rawGPUs = 500
	}
	res := ChargebackBenchResult{Name: "chargeback", MonthGPUs: cbMonthGPUs, RawGPUs: rawGPUs}
	dir, err := os.MkdirTemp("", "mp-bench-chargeback-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	_ = os.Chmod(dir, 0o755)
	chs, err := chproc.Start(ctx, filepath.Join(dir, "clickhouse"))
	if err != nil {
		return res, err
	}
	defer chs.Stop()
	ch, err := ingest.OpenClickHouse(ctx, chs.URL("bench"))
	if err != nil {
		return res, err
	}
	defer ch.Close()
	if err := migrations.ClickHouse(ctx, ch); err != nil {
		return res, err
	}

	load := time.Now()
	monthEnd := cbMonth.AddDate(0, 1, 0)
	hours := int(monthEnd.Sub(cbMonth) / time.Hour)
	res.MonthRollupRows = int64(hours * cbMonthGPUs)
	if err := ch.Exec(ctx, fmt.Sprintf(`INSERT INTO gpu_usage_hourly (hour, team, endpoint, model, version, replica, gpu_type, profile,
		gpu_seconds, cost_uusd_x3600, requests, util_pct_sum, memory_mb_sum)
		SELECT toDateTime(%d) + 3600 * h, %s, %s, %s, %s, concat('r-', toString(g)), %s, %s,
			toUInt64(3600), 3600 * %s, toUInt64(3600 * (g %% 7)), toFloat64(3600 * (g %% 100)), toUInt64(3600 * 20000)
		FROM (SELECT intDiv(number, %d) AS h, number %% %d AS g FROM system.numbers LIMIT %d)`,
		cbMonth.Unix(), cbTeamExpr, cbEndpointExpr, cbModelExpr, cbVersionExpr, cbTypeExpr, cbProfileExpr, cbRateExpr,
		cbMonthGPUs, cbMonthGPUs, res.MonthRollupRows)); err != nil {
		return res, fmt.Errorf("generate the rollup month: %w", err)
	}
	res.RawRows = int64(86400 * rawGPUs)
	if err := ch.Exec(ctx, fmt.Sprintf(`INSERT INTO gpu_usage (ts, node, gpu, slice, gpu_type, profile, team, endpoint, model, version, replica,
		util_pct, memory_mb, requests, rate_uusd_per_hour, batch_id, row_idx)
		SELECT toDateTime(%d) + s, concat('node-', toString(intDiv(g, 8))), toUInt16(g %% 8), toUInt16(0), %s, %s, %s, %s, %s, %s,
			concat('r-', toString(g)), toFloat32(g %% 100), toUInt64(20000), toUInt64(g %% 7), %s, concat('b-', toString(s)), toUInt32(g)
		FROM (SELECT intDiv(number, %d) AS s, number %% %d AS g FROM system.numbers LIMIT %d)`,
		cbRawDay.Unix(), cbTypeExpr, cbProfileExpr, cbTeamExpr, cbEndpointExpr, cbModelExpr, cbVersionExpr, cbRateExpr,
		rawGPUs, rawGPUs, res.RawRows)); err != nil {
		return res, fmt.Errorf("generate the raw day: %w", err)
	}
	res.LoadSeconds = time.Since(load).Seconds()

	// A day after the raw day has closed: reports of closed periods do not
	// look for ingest lag (chargeback.LagWindow), so both reads time only
	// the sums.
	svc := chargeback.New(ch, nil, func() time.Time { return cbRawDay.Add(48 * time.Hour) })
	finance := auth.System("bench") // sees every team's costs, as finance does
	byTeamEndpoint := []chargeback.Dimension{chargeback.DimTeam, chargeback.DimEndpoint}

	// The month: expected total from the generator's formula.
	var wantX int64
	for g := range cbMonthGPUs {
		wantX += int64(hours) * 3600 * cbRate(g)
	}
	month := chargeback.Query{From: cbMonth, To: monthEnd, GroupBy: byTeamEndpoint}
	hourlyTimes, hourlyRep, err := timeReports(ctx, svc, finance, month, cbMonthRuns/4)
	if err != nil {
		return res, err
	}
	res.MonthReportHourlyMs = float64(quantile(hourlyTimes, 0.95).Microseconds()) / 1000
	sealStart := time.Now()
	sealed, err := chargeback.NewSealer(ch, nil, func() time.Time { return monthEnd.Add(chargeback.SealAfter + 24*time.Hour) }).Seal(ctx)
	if err != nil {
		return res, err
	}
	res.SealSeconds = time.Since(sealStart).Seconds()
	monthTimes, monthRep, err := timeReports(ctx, svc, finance, month, cbMonthRuns)
	if err != nil {
		return res, err
	}
	res.MonthReportMs = float64(quantile(monthTimes, 0.95).Microseconds()) / 1000
	res.MonthTotalUUSD = monthRep.Total.CostMicroUSD
	monthOK := sealed == hours/24 && len(monthRep.Rows) == cbEndpoints && len(hourlyRep.Rows) == cbEndpoints
	for _, rep := range []*chargeback.Report{hourlyRep, monthRep} {
		monthOK = monthOK && rep.Total.CostX3600 == wantX && rep.Total.CostMicroUSD == (wantX+1800)/3600
	}
	for i := range monthRep.Rows {
		a, b := monthRep.Rows[i], hourlyRep.Rows[i]
		if a.Key != b.Key || a.GPUSeconds != b.GPUSeconds || a.CostX3600 != b.CostX3600 || a.CostMicroUSD != b.CostMicroUSD || a.Requests != b.Requests {
			monthOK = false
		}
	}

	day := chargeback.Query{From: cbRawDay, To: cbRawDay.Add(24 * time.Hour), GroupBy: byTeamEndpoint}
	drill := chargeback.Query{From: day.From, To: day.To, Team: "team-3",
		GroupBy: []chargeback.Dimension{chargeback.DimEndpoint, chargeback.DimVersion}, Source: chargeback.SourceRaw}
	drillTimes, _, err := timeReports(ctx, svc, finance, drill, cbRawRuns)
	if err != nil {
		return res, err
	}
	res.RawDayDrilldownMs = float64(quantile(drillTimes, 0.95).Microseconds()) / 1000
	rawQ := day
	rawQ.Source = chargeback.SourceRaw
	rawTimes, rawRep, err := timeReports(ctx, svc, finance, rawQ, cbRawRuns)
	if err != nil {
		return res, err
	}
	rollTimes, rollRep, err := timeReports(ctx, svc, finance, day, cbMonthRuns)
	if err != nil {
		return res, err
	}
	rawMed, rollMed := quantile(rawTimes, 0.5), quantile(rollTimes, 0.5)
	res.RawDayFromRawMs = float64(rawMed.Microseconds()) / 1000
	res.RawDayRollupMs = float64(rollMed.Microseconds()) / 1000
	if rollMed > 0 {
		res.RollupSpeedup = float64(rawMed) / float64(rollMed)
	}
	var dayWant int64
	for g := range rawGPUs {
		dayWant += 86400 * cbRate(g)
	}
	dayOK := rawRep.Total.CostX3600 == dayWant && rollRep.Total.CostX3600 == dayWant &&
		rawRep.Total.CostMicroUSD == rollRep.Total.CostMicroUSD && rawRep.Total.GPUSeconds == rollRep.Total.GPUSeconds && len(rawRep.Rows) == len(rollRep.Rows)
	for i := range rawRep.Rows {
		a, b := rawRep.Rows[i], rollRep.Rows[i]
		if a.Key != b.Key || a.GPUSeconds != b.GPUSeconds || a.CostX3600 != b.CostX3600 || a.CostMicroUSD != b.CostMicroUSD || a.Requests != b.Requests {
			dayOK = false
		}
	}
	res.TotalsEqual = monthOK && dayOK
	res.TargetsMet = map[string]bool{
		"month_report_p95_le_100ms": res.MonthReportMs <= 100,
		"rollup_speedup_ge_100x":    res.RollupSpeedup >= 100,
		"totals_equal":              res.TotalsEqual,
	}
	return res, nil
}

// timeReports runs q n times after one warm-up and returns the durations,
// sorted, and the last report.
func timeReports(ctx context.Context, svc *chargeback.Service, p *auth.Principal, q chargeback.Query, n int) ([]time.Duration, *chargeback.Report, error) {
	rep, err := svc.Report(ctx, p, q)
	if err != nil {
		return nil, nil, fmt.Errorf("chargeback bench report: %w", err)
	}
	out := make([]time.Duration, 0, n)
	for range n {
		start := time.Now()
		if rep, err = svc.Report(ctx, p, q); err != nil {
			return nil, nil, fmt.Errorf("chargeback bench report: %w", err)
		}
		out = append(out, time.Since(start))
	}
	return out, rep, nil
}
