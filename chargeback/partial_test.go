package chargeback_test

import (
	"reflect"
	"testing"
	"time"

	"modelplane/chargeback"
	"modelplane/internal/chtest"
)

// TestPartialHoursFromTheRollupEqualRawSeconds: a partial hour with more
// raw seconds up to now than the rest of its hour is read as its hour from
// the hourly rollup less the raw seconds of that rest; every report over
// such periods (both ends inside hours, a part of one hour, a canary's
// endpoint by version up to now, splits by caller team at hour grain,
// seconds stored past now) equals, to the second and
// the micro-dollar, the same report read from the raw seconds alone, with
// usage in the same hours before and after the period and CPU cores among
// it. A second added to the rollup alone then shows in the report, so the
// comparison passed through the rollup.
func TestPartialHoursFromTheRollupEqualRawSeconds(t *testing.T) {
	t.Parallel()
	ch := chtest.New(t)
	from, to := t0, t0.Add(4*time.Hour)
	rows := fleetUsage(from, to)
	for s := from; s.Before(to); s = s.Add(7 * time.Second) {
		rows = append(rows, rec{ts: s, node: "c1", gpuType: "cpu", profile: "cpu-core", team: "risk", endpoint: "fraud",
			model: "fraud-model", ver: "v2", util: 40, memMB: 512, requests: 1, rate: 40_000})
	}
	insert(t, ch, rows)
	svc := chargeback.New(ch, nil, clockAt(t, t0.Add(3*time.Hour+40*time.Minute)))
	periods := []struct {
		from, to time.Time
		endpoint string
	}{
		{t0.Add(5 * time.Minute), t0.Add(3*time.Hour + 55*time.Minute), ""},
		{t0.Add(70 * time.Minute), t0.Add(115 * time.Minute), ""},
		{t0.Add(2*time.Hour + 20*time.Minute + 17*time.Second), t0.Add(3*time.Hour + 40*time.Minute), "fraud"},
		{t0.Add(3 * time.Hour), t0.Add(3*time.Hour + 50*time.Minute), ""},
		{t0.Add(3*time.Hour + 30*time.Minute), t0.Add(3*time.Hour + 40*time.Minute), "fraud"},
	}
	groupings := [][]chargeback.Dimension{
		nil,
		{chargeback.DimTeam},
		{chargeback.DimTeam, chargeback.DimEndpoint, chargeback.DimVersion},
		{chargeback.DimGPUType, chargeback.DimAllocation},
		{chargeback.DimVersion},
		{chargeback.DimEndpoint, chargeback.DimCallerTeam},
	}
	for _, p := range periods {
		for _, by := range groupings {
			q := chargeback.Query{From: p.from, To: p.to, GroupBy: by, Endpoint: p.endpoint}
			agg, err := svc.Report(t.Context(), finance, q)
			if err != nil {
				t.Fatal(err)
			}
			q.Source = chargeback.SourceRaw
			raw, err := svc.Report(t.Context(), finance, q)
			if err != nil {
				t.Fatal(err)
			}
			if len(raw.Rows) == 0 || !reflect.DeepEqual(exactPart(t, agg, raw), exactPart(t, raw, agg)) {
				t.Errorf("%s–%s %q by %v: rollup less raw\n%+v\nraw seconds\n%+v", p.from.Format(time.TimeOnly), p.to.Format(time.TimeOnly),
					p.endpoint, by, agg, raw)
			}
			var teams []string
			if p.endpoint != "" {
				teams = []string{"risk"}
			}
			if seconds, x3600 := exact(rows, p.from, p.to, teams); p.endpoint == "" && (raw.Total.GPUSeconds != seconds || raw.Total.CostX3600 != x3600) {
				t.Errorf("%s–%s: raw total %d s, %d µUSD×3600; the records sum to %d s, %d", p.from.Format(time.TimeOnly), p.to.Format(time.TimeOnly),
					raw.Total.GPUSeconds, raw.Total.CostX3600, seconds, x3600)
			}
		}
	}

	// A second in the rollup alone (no raw second behind it) shows in the
	// canary's hour: the report read it from the rollup.
	b, err := ch.PrepareBatch(t.Context(), "INSERT INTO gpu_usage_hourly (hour, team, endpoint, model, version, replica, gpu_type, profile, "+
		"gpu_seconds, cost_uusd_x3600, requests, util_pct_sum, memory_mb_sum)")
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Append(t0.Add(3*time.Hour), "risk", "fraud", "fraud-model", "v1", "fraud-v1-0", "A100-80GB", "full",
		uint64(1), uint64(3_500_001), uint64(0), float64(0), uint64(0)); err != nil {
		t.Fatal(err)
	}
	if err := b.Send(); err != nil {
		t.Fatal(err)
	}
	q := chargeback.Query{From: periods[2].from, To: periods[2].to, GroupBy: []chargeback.Dimension{chargeback.DimVersion}, Endpoint: "fraud"}
	agg, err := svc.Report(t.Context(), finance, q)
	if err != nil {
		t.Fatal(err)
	}
	q.Source = chargeback.SourceRaw
	raw, err := svc.Report(t.Context(), finance, q)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := agg.Total.GPUSeconds, raw.Total.GPUSeconds+1; got != want {
		t.Errorf("canary with a rollup-only second: %d GPU-seconds, want %d (the raw %d and that second)", got, want, raw.Total.GPUSeconds)
	}
}
