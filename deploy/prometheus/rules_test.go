// Package prometheus_test checks the Prometheus files modelplane ships with
// Prometheus's own tool: the example configuration and the alert rules
// load, and the rules' unit tests (alerts_test.yml) pass.
package prometheus_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

func promtool(t *testing.T, args ...string) {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatalf("promtool not found: install the prometheus package (scripts/install-deps.sh test does)")
	}
	out, err := exec.Command(path, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %v: %v\n%s", args, err, out)
	}
}

func TestConfigAndRulesLoad(t *testing.T) {
	t.Parallel()
	promtool(t, "check", "config", "prometheus.yml")
	promtool(t, "check", "rules", "alerts.yml")
}

// TestAlertRules runs each alert on the case it is for and on the
// neighbouring case that must stay quiet.
func TestAlertRules(t *testing.T) {
	t.Parallel()
	promtool(t, "test", "rules", "alerts_test.yml")
}

// TestDashboardQueries checks that every query of the Grafana dashboard
// (deploy/grafana/modelplane.json) is PromQL Prometheus accepts and reads
// only the families docs/operations.md documents (listed in exported):
// each becomes a recording rule that promtool checks, with the
// dashboard's endpoint variable at its "All".
func TestDashboardQueries(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../grafana/modelplane.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatal(err)
	}
	var rules strings.Builder
	rules.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	n := 0
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			expr := strings.ReplaceAll(tg.Expr, "$endpoint", ".*")
			for _, name := range metricName.FindAllString(expr, -1) {
				if !exported[name] && !strings.HasSuffix(name, "_bucket") && !strings.HasSuffix(name, "_count") {
					t.Errorf("panel %q reads %s, which modelplane does not export", p.Title, name)
				}
			}
			q, _ := json.Marshal(expr)
			fmt.Fprintf(&rules, "      - record: dashboard:panel%d\n        expr: %s\n", n, q)
			n++
		}
	}
	if n == 0 {
		t.Fatal("the dashboard has no queries")
	}
	path := filepath.Join(t.TempDir(), "dashboard.yml")
	if err := os.WriteFile(path, []byte(rules.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	promtool(t, "check", "rules", path)
}

// metricName finds the series names in the dashboard's queries.
var metricName = regexp.MustCompile(`\b(ml_serving|modelplane|mp)_[a-z0-9_]+`)

// exported are the families the dashboard may read (docs/operations.md).
var exported = map[string]bool{}

func init() {
	for _, n := range strings.Fields(`ml_serving_request_duration_seconds ml_serving_platform_overhead_seconds
		ml_serving_ttft_seconds ml_serving_sla_p99_latency_seconds ml_serving_replicas_wanted ml_serving_replicas
		ml_serving_queue_depth ml_serving_batch_size ml_serving_kv_cache_utilization_ratio ml_serving_tokens_per_second
		ml_serving_cold_start_seconds ml_serving_cost_usd_per_hour ml_serving_budget_spent_usd ml_serving_budget_usd
		ml_serving_prediction_drift_score ml_serving_gpu_utilization_ratio ml_serving_gpu_memory_used_bytes
		ml_serving_gpu_memory_total_bytes modelplane_node_slices_used modelplane_node_cpu_cores_used
		modelplane_node_heartbeat_age_seconds`) {
		exported[n] = true
	}
}
