package bench

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestSummaryTablesEachRatioAgainstItsTarget(t *testing.T) {
	t.Parallel()
	lines := strings.Join([]string{
		`bench-proxies: nginx, haproxy, caddy and wrk already installed`,
		`{"name":"engine","sim_speedup_vs_realtime":29.3,"sim_speedup_per_cpu_second":110.8,"continuous_vs_static_throughput":11.1,"kv_waste_paged_pct":1.2,"kv_waste_contiguous_pct":69.4}`,
		`{"name":"autoscale","share_of_interval":0.004,"scenarios":[{"scenario":"burst","seed":2,"gpu_hours_vs_oracle":1.63,"vs_oracle_target":2,"within_sla_pct":91.7,"sla_target_pct":90}]}`,
		`{"name":"drift","target_met":false}`,
		`{"name":"api","slowest_route_p99_vs_median":2.49,"routes":{}}`,
		`{"name":"pages","slowest_route_p99_vs_median":3.4}`,
		`{"name":"ingest","usage_vs_clickhouse":0.53,"predictions_vs_clickhouse":0.39,"reqstats_vs_clickhouse":1.01,"targets_met":{"rows_per_s_at_least_100k":true}}`,
	}, "\n")
	file := filepath.Join(t.TempDir(), "bench.jsonl")
	if err := os.WriteFile(file, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	err := runSummary(context.Background(), Config{Results: file}, &out)
	if !errors.Is(err, ErrTargetsMissed) {
		t.Errorf("summary = %v, want ErrTargetsMissed (gateway and others printed nothing)", err)
	}
	got := out.String()
	if n := strings.Count(got, "\n{"); n != 5 || !strings.HasPrefix(got, "{") {
		t.Errorf("echoed %d JSON objects, want 6, one a line, first:\n%s", n+1, got)
	}
	// Compare lines by their fields, not the table's padding.
	var table []string
	for _, l := range strings.Split(got, "\n") {
		table = append(table, strings.Join(strings.Fields(l), " "))
	}
	for _, want := range []string{
		"engine sim_speedup_vs_realtime 29.3 >= 100 FAIL",
		"engine sim_speedup_per_cpu_second 110.8 >= 100 pass",
		"engine kv_waste_paged_pct 1.2 <= 4 pass",
		"autoscale share_of_interval 0.004 <= 0.01 pass",
		"autoscale burst seed 2 GPU-hours vs oracle 1.63 <= 2 pass",
		"autoscale burst seed 2 minutes within SLA % 91.7 >= 90 pass",
		"drift target_met - - FAIL",
		"ingest usage_vs_clickhouse 0.53 >= 0.8 FAIL",
		"ingest predictions_vs_clickhouse 0.39 >= 0.8 FAIL",
		"ingest reqstats_vs_clickhouse 1.01 >= 0.8 pass",
		"api slowest_route_p99_vs_median 2.49 <= 3 pass",
		"pages slowest_route_p99_vs_median 3.4 <= 3 FAIL",
		"gateway - - - no result",
		"9 of 20 met",
	} {
		if !slices.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, got)
		}
	}
}

// TestSummaryTablesTheTracingRatios: the gateway's traced/untraced rps
// and p99 ratios are rows of their own against 0.97 and 1.10.
func TestSummaryTablesTheTracingRatios(t *testing.T) {
	t.Parallel()
	in := `{"name":"gateway","rps_ratio_vs_nginx":1.2,"rps_ratio_vs_haproxy":0.9,"tracing_rps_ratio":0.985,"tracing_p99_ratio_c64":1.12,"tracing_cpu_ratio_c64":1.02}`
	rows := summarise(map[string]map[string]any{"gateway": mustJSON(t, in)})
	var got []string
	for _, r := range rows {
		if r.bench == "gateway" {
			got = append(got, strings.Join([]string{r.what, r.value, r.target, r.result}, " "))
		}
	}
	for _, want := range []string{"tracing_rps_ratio 0.985 >= 0.97 pass", "tracing_p99_ratio_c64 1.12 <= 1.1 FAIL"} {
		if !slices.Contains(got, want) {
			t.Errorf("gateway rows %q lack %q", got, want)
		}
	}
}

func mustJSON(t *testing.T, s string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		t.Fatal(err)
	}
	return m
}
