package chargeback_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"modelplane/chargeback"
	"modelplane/internal/chtest"
)

// TestCPUCoresAreNotGPUTime: a team that ran on CPU cores only shows no
// GPU time and no GPU utilisation (not measured rather than its CPU load),
// its core-seconds apart; a team on a GPU keeps its GPU figures; the total's
// GPU utilisation is the GPUs' alone. The same holds read from raw seconds
// and from the rollups, in the report and in the CSV.
func TestCPUCoresAreNotGPUTime(t *testing.T) {
	t.Parallel()
	ch := chtest.New(t)
	from, to := t0.Add(30*time.Minute), t0.Add(2*time.Hour+30*time.Minute)
	var rows []rec
	for s := t0; s.Before(t0.Add(3 * time.Hour)); s = s.Add(time.Second) {
		for core := range uint16(2) {
			rows = append(rows, rec{ts: s, node: "cpu-1", gpu: core, gpuType: "cpu", profile: "cpu-core", team: "risk", endpoint: "fraud",
				model: "fraud-model", ver: "v1", util: 60, memMB: 512, requests: 1, rate: 40_000})
		}
		rows = append(rows, rec{ts: s, node: "gpu-1", gpuType: "A100-80GB", profile: "full", team: "search", endpoint: "rank",
			model: "rank-model", ver: "v1", util: 40, memMB: 4096, requests: 2, rate: 3_500_000})
	}
	insert(t, ch, rows)
	svc := chargeback.New(ch, nil, clockAt(t, to.Add(24*time.Hour)))
	const period = 2 * 3600
	for _, src := range []chargeback.Source{chargeback.SourceAuto, chargeback.SourceRaw} {
		rep, err := svc.Report(t.Context(), finance, chargeback.Query{From: from, To: to, GroupBy: []chargeback.Dimension{chargeback.DimTeam}, Source: src})
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Rows) != 2 {
			t.Fatalf("source %d: %d rows, want risk and search: %+v", src, len(rep.Rows), rep.Rows)
		}
		risk, search := rep.Rows[0], rep.Rows[1]
		if got := risk.GPUOnlySeconds(); got != 0 || risk.GPUOnlyHours() != "0" || risk.CPUCoreSeconds != 2*period || risk.CPUCoreHours() != "4" {
			t.Errorf("source %d: risk GPU-seconds %d (%s h), core-seconds %d (%s h); want 0 GPU, %d core-seconds (4 h)",
				src, got, risk.GPUOnlyHours(), risk.CPUCoreSeconds, risk.CPUCoreHours(), 2*period)
		}
		if pct, ok := risk.AvgGPUUtilPct(); ok {
			t.Errorf("source %d: risk GPU utilisation %.2f%%, want not measured", src, pct)
		}
		if pct, ok := search.AvgGPUUtilPct(); !ok || pct != 40 || search.GPUOnlySeconds() != period || search.CPUCoreSeconds != 0 {
			t.Errorf("source %d: search %d GPU-seconds, %d core-seconds, util %.2f (%v); want %d, 0, 40", src, search.GPUOnlySeconds(),
				search.CPUCoreSeconds, pct, ok, period)
		}
		if pct, ok := rep.Total.AvgGPUUtilPct(); !ok || pct != 40 || rep.Total.GPUOnlySeconds() != period || rep.Total.CPUCoreSeconds != 2*period {
			t.Errorf("source %d: total %d GPU-seconds, %d core-seconds, util %.2f; want %d, %d, 40 (the GPU's alone)", src,
				rep.Total.GPUOnlySeconds(), rep.Total.CPUCoreSeconds, pct, period, 2*period)
		}
		var buf bytes.Buffer
		if err := chargeback.WriteCSV(&buf, rep); err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{
			"\r\ngroup,risk,,,,,,0,0,0.160000,160000,14400,0.011111,,,,14400,4,,,\r\n",
			"\r\ngroup,search,,,,,,7200,2,7.000000,7000000,14400,0.486111,,,40.00,0,0,,,\r\n",
			"\r\ntotal,,,,,,,7200,2,7.160000,7160000,28800,0.248611,,,40.00,14400,4,,,\r\n",
		} {
			if !strings.Contains(buf.String(), want) {
				t.Errorf("source %d: CSV lacks %q:\n%s", src, want, buf.String())
			}
		}
	}
}
