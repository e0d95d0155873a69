package chargeback

import (
	"encoding/csv"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"modelplane/money"
)

// CSVColumns are the CSV's columns, in order. They are a contract with the
// spreadsheets finance builds on them: add columns only at the end, never
// rename or reorder one. Every dimension has its column whether or not the
// report groups by it (empty when not); "kind" is "group" for a row and
// "total" for the last line, so a sum over the group rows is the total.
var CSVColumns = []string{
	"kind", "team", "endpoint", "model", "version", "gpu_type", "allocation",
	"gpu_seconds", "gpu_hours", "cost_usd", "cost_uusd", "requests", "cost_per_1k_requests_usd",
	"tokens", "cost_per_1m_tokens_usd", "avg_gpu_util_pct",
	// CPU cores, priced per core-hour, counted apart from the GPUs:
	// gpu_seconds, gpu_hours and avg_gpu_util_pct leave them out.
	"cpu_core_seconds", "cpu_core_hours",
	// The team whose calls the row's cost is for (group_by caller_team).
	"caller_team",
	// The inference graph whose steps the row's cost is for (group_by
	// graph; docs/graphs.md).
	"graph",
	// The graph's version whose steps made the calls (group_by
	// graph_version).
	"graph_version",
}

// WriteCSV writes the report as RFC 4180 CSV (CRLF line ends) after one
// comment line naming the period, the grouping and the rates version.
func WriteCSV(w io.Writer, rep *Report) error {
	by := make([]string, len(rep.GroupBy))
	for i, d := range rep.GroupBy {
		by[i] = string(d)
	}
	if _, err := fmt.Fprintf(w, "# modelplane chargeback; period %s to %s (UTC, end excluded); group_by %s; rates %s\r\n",
		rep.From.UTC().Format(time.RFC3339), rep.To.UTC().Format(time.RFC3339), strings.Join(by, ","), rep.RatesVersion); err != nil {
		return fmt.Errorf("write csv: %w", err)
	}
	cw := csv.NewWriter(w)
	cw.UseCRLF = true
	if err := cw.Write(CSVColumns); err != nil {
		return fmt.Errorf("write csv: %w", err)
	}
	for _, r := range rep.Rows {
		if err := cw.Write(csvRecord("group", r, slices.Contains(rep.GroupBy, DimTeam))); err != nil {
			return fmt.Errorf("write csv: %w", err)
		}
	}
	if err := cw.Write(csvRecord("total", rep.Total, false)); err != nil {
		return fmt.Errorf("write csv: %w", err)
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		return fmt.Errorf("write csv: %w", err)
	}
	return nil
}

func csvRecord(kind string, r Row, groupsTeam bool) []string {
	per1k, tokens, per1m := "", "", ""
	if v, ok := r.CostPer1kRequestsMicroUSD(); ok {
		per1k = money.USD(v)
	}
	if r.TokensKnown {
		tokens = strconv.FormatInt(r.Tokens, 10)
	}
	if v, ok := r.CostPer1MTokensMicroUSD(); ok {
		per1m = money.USD(v)
	}
	util := "" // not measured: no GPU in the group
	if pct, ok := r.AvgGPUUtilPct(); ok {
		util = strconv.FormatFloat(pct, 'f', 2, 64)
	}
	team := r.Team
	if kind == "group" && team == "" && groupsTeam {
		team = Unallocated
	}
	return []string{
		kind, csvSafe(team), csvSafe(r.Endpoint), csvSafe(r.Model), csvSafe(r.Version), csvSafe(r.GPUType), csvSafe(r.Allocation),
		strconv.FormatInt(r.GPUOnlySeconds(), 10), r.GPUOnlyHours(), money.USD(r.CostMicroUSD), strconv.FormatInt(r.CostMicroUSD, 10),
		strconv.FormatInt(r.Requests, 10), per1k, tokens, per1m, util,
		strconv.FormatInt(r.CPUCoreSeconds, 10), r.CPUCoreHours(), csvSafe(r.CallerTeam), csvSafe(r.Graph), csvSafe(r.GraphVersion),
	}
}

// csvSafe keeps a name from being read as a formula by a spreadsheet
// (CSV injection): names are validated elsewhere, but usage rows carry
// whatever agents reported.
func csvSafe(s string) string {
	if s != "" && strings.ContainsRune("=+-@\t\r", rune(s[0])) {
		return "'" + s
	}
	return s
}
