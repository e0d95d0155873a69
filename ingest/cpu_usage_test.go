package ingest_test

import (
	"bytes"
	"context"
	"encoding/csv"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coder/quartz"

	"modelplane/auth"
	"modelplane/billing"
	"modelplane/busapi"
	"modelplane/chargeback"
	"modelplane/db"
	"modelplane/ingest"
	"modelplane/internal/pgtest"
)

// cpuSecond is a CPU node's batch for one second as its agent meters it:
// one record per allocated core (replica xgb-r1 on 2 cores, xgb-r2 on 1).
func cpuSecond(node string, sec int64) busapi.UsageBatch {
	t := baseTime + sec
	b := busapi.UsageBatch{ID: fmt.Sprintf("%s-%d-0", node, t), Node: node}
	for _, r := range []struct {
		replica string
		cores   int
	}{{"xgb-r1", 2}, {"xgb-r2", 1}} {
		for core := range r.cores {
			rec := busapi.Usage{Time: t, Node: node, Slice: core, GPUType: busapi.CPUType, Profile: busapi.ProfileCPU, Team: "risk",
				Endpoint: "fraud-cpu", Model: "fraud-xgb", Version: "x1", Replica: r.replica, UtilPct: 20, MemoryMB: 512}
			if core == 0 {
				rec.Requests = 3
			}
			b.Records = append(b.Records, rec)
		}
	}
	return b
}

// TestCPUUsagePricedPerCoreHour runs CPU usage through the real pipeline:
// MP_USAGE, the usage consumer pricing each core-second at the default
// cpu rate of cost_rates, ClickHouse and its hourly rollup, and the
// chargeback report and CSV, beside GPU usage in the same report.
func TestCPUUsagePricedPerCoreHour(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.New(t)
	e := newEnv(t, nil, 0)
	cfg := e.usageConfig(t, e.js)
	cfg.LoadRates = func(ctx context.Context) (ingest.Pricer, error) { return billing.LoadRates(ctx, db.New(pool)) }
	e.start(t, cfg)
	const seconds = 900
	var batches []busapi.UsageBatch
	for sec := range int64(seconds) {
		batches = append(batches, cpuSecond("cpu-0", sec))
		g := busapi.UsageBatch{ID: fmt.Sprintf("gpu-0-%d-0", baseTime+sec), Node: "gpu-0", Records: []busapi.Usage{{Time: baseTime + sec,
			Node: "gpu-0", GPUType: "A100-80GB", Profile: busapi.ProfileFull, Team: "risk", Endpoint: "fraud", Model: "fraud-xgb",
			Version: "v3", Replica: "fraud-r1", UtilPct: 50}}}
		batches = append(batches, g)
	}
	e.publishAsync(t, e.js, batches)
	e.waitDrained(t, "", 60*time.Second)

	var rate uint64
	if err := e.ch.QueryRow(ctx, "SELECT max(rate_uusd_per_hour) FROM gpu_usage WHERE gpu_type = 'cpu'").Scan(&rate); err != nil || rate != 40_000 {
		t.Fatalf("cpu rows stored at %d µUSD per core-hour, %v; want the default cpu-core rate, 40000", rate, err)
	}

	finance := &auth.Principal{Name: "fin@example.com", PlatformRole: auth.RoleFinance}
	clk := quartz.NewMock(t)
	clk.Set(time.Unix(baseTime, 0).Add(48 * time.Hour))
	svc := chargeback.New(e.ch, db.New(pool), clk)
	from := time.Unix(baseTime, 0).UTC()
	// 2,700 core-seconds at $0.04 a core-hour is $0.03; 900 A100 seconds
	// at $3.50 an hour is $0.875.
	const cpuCost, gpuCost = 30_000, 875_000
	for _, src := range []chargeback.Source{chargeback.SourceAuto, chargeback.SourceRaw} {
		rep, err := svc.Report(ctx, finance, chargeback.Query{From: from, To: from.Add(time.Hour), Source: src,
			GroupBy: []chargeback.Dimension{chargeback.DimEndpoint, chargeback.DimGPUType, chargeback.DimAllocation}})
		if err != nil {
			t.Fatal(err)
		}
		byType := map[string]chargeback.Row{}
		for _, r := range rep.Rows {
			byType[r.GPUType] = r
		}
		c, g := byType[busapi.CPUType], byType["A100-80GB"]
		if len(rep.Rows) != 2 || c.Endpoint != "fraud-cpu" || c.Allocation != busapi.ProfileCPU || c.GPUSeconds != 3*seconds ||
			c.CPUCoreSeconds != 3*seconds || c.CostMicroUSD != cpuCost || c.Requests != 2*3*seconds {
			t.Errorf("source %d: cpu row = %+v; want fraud-cpu on cpu-core, 2700 core-seconds, %d µUSD, 5400 requests (rows %+v)", src, c, cpuCost, rep.Rows)
		}
		if g.GPUSeconds != seconds || g.CPUCoreSeconds != 0 || g.CostMicroUSD != gpuCost {
			t.Errorf("source %d: gpu row = %+v; want 900 GPU-seconds, no core-seconds, %d µUSD", src, g, gpuCost)
		}
		if rep.Total.CostMicroUSD != cpuCost+gpuCost || rep.Total.CPUCoreSeconds != 3*seconds {
			t.Errorf("source %d: total = %+v; want %d µUSD and 2700 core-seconds", src, rep.Total, cpuCost+gpuCost)
		}

		var buf bytes.Buffer
		if err := chargeback.WriteCSV(&buf, rep); err != nil {
			t.Fatal(err)
		}
		_, body, _ := strings.Cut(buf.String(), "\r\n") // the comment line
		recs, err := csv.NewReader(strings.NewReader(body)).ReadAll()
		if err != nil {
			t.Fatal(err)
		}
		col := func(name string) int { return slices.Index(recs[0], name) }
		var cpuLine []string
		for _, r := range recs[1:] {
			if r[col("gpu_type")] == busapi.CPUType {
				cpuLine = r
			}
		}
		if cpuLine == nil || cpuLine[col("allocation")] != busapi.ProfileCPU || cpuLine[col("cost_uusd")] != "30000" ||
			cpuLine[col("cost_usd")] != "0.030000" || cpuLine[col("cpu_core_seconds")] != "2700" || cpuLine[col("cpu_core_hours")] != "0.75" {
			t.Errorf("source %d: CSV cpu line = %q (columns %q); want cpu-core, 30000 µUSD ($0.030000), 2700 core-seconds, 0.75 core-hours",
				src, cpuLine, recs[0])
		}
	}
}
