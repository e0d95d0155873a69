package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"text/tabwriter"
)

// ErrTargetsMissed is what `modelplane bench summary` returns after its
// table when a benchmark it expects printed no result.
var ErrTargetsMissed = errors.New("bench summary: a benchmark printed no result")

// summaryBenchmarks are the benchmarks `make bench` runs, in its order: the
// summary reports one that printed nothing.
var summaryBenchmarks = []string{"api", "engine", "placement", "ingest", "gateway", "rollback", "chargeback", "pages", "drift", "runtime", "autoscale", "llm"}

// ratioCheck is a figure a benchmark prints and its target: at least (or,
// with atMost, at most) Target. The targets are issue 31's and the
// benchmarks' own issues'.
type ratioCheck struct {
	bench, field string
	target       float64
	atMost       bool
}

var ratioChecks = []ratioCheck{
	{bench: "api", field: "slowest_route_p99_vs_median", target: 3, atMost: true},
	{bench: "pages", field: "slowest_route_p99_vs_median", target: 3, atMost: true},
	{bench: "engine", field: "sim_speedup_vs_realtime", target: 100},
	{bench: "engine", field: "sim_speedup_per_cpu_second", target: 100},
	{bench: "engine", field: "continuous_vs_static_throughput", target: 2},
	{bench: "engine", field: "kv_waste_paged_pct", target: 4, atMost: true},
	{bench: "engine", field: "kv_waste_contiguous_pct", target: 60},
	{bench: "ingest", field: "usage_vs_clickhouse", target: 0.8},
	{bench: "ingest", field: "predictions_vs_clickhouse", target: 0.8},
	{bench: "ingest", field: "reqstats_vs_clickhouse", target: 0.8},
	{bench: "gateway", field: "rps_ratio_vs_nginx", target: 1},
	{bench: "gateway", field: "rps_ratio_vs_haproxy", target: 1},
	// The same comparison as CPU a request, both driven at once.
	{bench: "gateway", field: "cpu_ratio_vs_nginx_at_once", target: 1},
	{bench: "gateway", field: "cpu_ratio_vs_haproxy_at_once", target: 1},
	// Against nginx doing the gateway's work in Lua (gateway_peer.go):
	// the peer on the same work.
	{bench: "gateway", field: "rps_ratio_vs_nginx_lua", target: 1},
	{bench: "gateway", field: "cpu_ratio_vs_nginx_lua_at_once", target: 1},
	// Tracing every request against none, in interleaved slices of one
	// run (issue 27): the medians of the pairs' ratios.
	{bench: "gateway", field: "tracing_rps_ratio", target: 0.97},
	{bench: "gateway", field: "tracing_p99_ratio_c64", target: 1.10, atMost: true},
	{bench: "autoscale", field: "share_of_interval", target: 0.01, atMost: true},
}

// summaryRow is one line of the table.
type summaryRow struct {
	bench, what, value, target, result string
}

// runSummary reads the JSON lines the benchmarks printed (cfg.Results, or
// standard input) and prints each object again, one a line, then a table
// of every ratio with its target and pass or fail: the figures of
// ratioChecks, each autoscale scenario's GPU-hours against the oracle and
// minutes within the SLA, and, for a benchmark with none of those, each
// entry of its own targets_met (or target_met).
func runSummary(_ context.Context, cfg Config, out io.Writer) error {
	in := io.Reader(os.Stdin)
	if cfg.Results != "" && cfg.Results != "-" {
		f, err := os.Open(cfg.Results)
		if err != nil {
			return fmt.Errorf("bench summary: %w", err)
		}
		defer f.Close()
		in = f
	}
	results, err := readResults(in, out)
	if err != nil {
		return err
	}
	rows := summarise(results)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "BENCHMARK\tRATIO\tVALUE\tTARGET\tRESULT")
	pass, missing := 0, false
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.bench, r.what, r.value, r.target, r.result)
		switch r.result {
		case "pass":
			pass++
		case "no result":
			missing = true
		}
	}
	fmt.Fprintf(tw, "\t%d of %d met\t\t\t\n", pass, len(rows))
	if err := tw.Flush(); err != nil {
		return err
	}
	if missing {
		return ErrTargetsMissed
	}
	return nil
}

// readResults reads one JSON object a line, echoes each (compacted) to
// out, and returns them by benchmark name; lines that are not JSON
// objects with a name (a script's messages) are skipped.
func readResults(in io.Reader, out io.Writer) (map[string]map[string]any, error) {
	results := map[string]map[string]any{}
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 0, 1<<20), 64<<20)
	for sc.Scan() {
		var obj map[string]any
		if json.Unmarshal(sc.Bytes(), &obj) != nil {
			continue
		}
		name, _ := obj["name"].(string)
		if name == "" {
			continue
		}
		results[name] = obj
		b, err := json.Marshal(obj)
		if err != nil {
			return nil, err
		}
		if _, err := fmt.Fprintf(out, "%s\n", b); err != nil {
			return nil, err
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("bench summary: %w", err)
	}
	return results, nil
}

// summarise builds the table's rows, benchmark by benchmark.
func summarise(results map[string]map[string]any) []summaryRow {
	names := slices.Clone(summaryBenchmarks)
	for n := range results {
		if !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	slices.Sort(names[len(summaryBenchmarks):])
	var rows []summaryRow
	for _, n := range names {
		obj, ok := results[n]
		if !ok {
			rows = append(rows, summaryRow{n, "-", "-", "-", "no result"})
			continue
		}
		before := len(rows)
		for _, c := range ratioChecks {
			if c.bench != n {
				continue
			}
			row := summaryRow{bench: n, what: c.field, target: ">= " + num(c.target)}
			if c.atMost {
				row.target = "<= " + num(c.target)
			}
			v, ok := obj[c.field].(float64)
			switch {
			case !ok:
				row.value, row.result = "-", "not measured"
			case c.atMost:
				row.value, row.result = num(v), passFail(v <= c.target)
			default:
				row.value, row.result = num(v), passFail(v >= c.target)
			}
			rows = append(rows, row)
		}
		rows = append(rows, scenarioRows(n, obj)...)
		if len(rows) == before {
			rows = append(rows, targetRows(n, obj)...)
		}
		if len(rows) == before {
			rows = append(rows, summaryRow{n, "-", "-", "-", "no target"})
		}
	}
	return rows
}

// scenarioRows are bench autoscale's scenarios: GPU-hours against the
// oracle and minutes within the SLA, each against its target.
func scenarioRows(bench string, obj map[string]any) []summaryRow {
	list, _ := obj["scenarios"].([]any)
	var rows []summaryRow
	for _, x := range list {
		s, _ := x.(map[string]any)
		name, _ := s["scenario"].(string)
		seed, _ := s["seed"].(float64)
		vs, _ := s["gpu_hours_vs_oracle"].(float64)
		vsT, _ := s["vs_oracle_target"].(float64)
		sla, _ := s["within_sla_pct"].(float64)
		slaT, _ := s["sla_target_pct"].(float64)
		at := fmt.Sprintf("%s seed %d", name, int(seed))
		rows = append(rows,
			summaryRow{bench, at + " GPU-hours vs oracle", num(vs), "<= " + num(vsT), passFail(vs <= vsT)},
			summaryRow{bench, at + " minutes within SLA %", num(sla), ">= " + num(slaT), passFail(sla >= slaT)})
	}
	return rows
}

// targetRows are a benchmark's own verdicts: targets_met (a map, or one
// boolean) or target_met.
func targetRows(bench string, obj map[string]any) []summaryRow {
	var rows []summaryRow
	switch t := obj["targets_met"].(type) {
	case map[string]any:
		keys := make([]string, 0, len(t))
		for k := range t {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			met, _ := t[k].(bool)
			rows = append(rows, summaryRow{bench, k, "-", "-", passFail(met)})
		}
	case bool:
		rows = append(rows, summaryRow{bench, "targets_met", "-", "-", passFail(t)})
	}
	if met, ok := obj["target_met"].(bool); ok {
		rows = append(rows, summaryRow{bench, "target_met", "-", "-", passFail(met)})
	}
	return rows
}

func passFail(ok bool) string {
	if ok {
		return "pass"
	}
	return "FAIL"
}

// num prints a figure with four significant digits, whole from 1,000.
func num(v float64) string {
	if v >= 1000 || v <= -1000 {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'g', 4, 64)
}
