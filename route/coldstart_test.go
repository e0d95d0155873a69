package route_test

import (
	"slices"
	"strconv"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"modelplane/busapi"
	"modelplane/route"
)

// The routing entry of an endpoint scaled to zero carries its cold-start
// budget (120 s: its versions need a GPU) and its version's measured cold
// start, the median of the latest five the heartbeats reported; a replica's
// cold start is recorded once, on the first heartbeat that shows it ready,
// whatever later heartbeats say (one whose runtime metrics could not be
// read has no load or warm-up), and counted in the fleet's histogram. An
// endpoint with a minimum carries neither, so its entry does not change
// with cold starts.
func TestScaledToZeroEntryCarriesColdStart(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	reg := prometheus.NewRegistry()
	if err := f.fleet.Register(reg); err != nil {
		t.Fatal(err)
	}
	// Five earlier starts of v1, oldest first; the heartbeat's pushes the
	// oldest out.
	if _, err := f.pool.Exec(t.Context(), `INSERT INTO version_cold_starts SELECT id, '{9000,1000,7000,3000,2000}' FROM model_versions WHERE name = 'v1'`); err != nil {
		t.Fatal(err)
	}
	inv := []busapi.GPU{{Index: 0, Type: "A100-80GB", MemoryMB: 81920, MIG: true}}
	for i := range 7 {
		inv[0].Slices = append(inv[0].Slices, busapi.Slice{Index: i, Profile: "mig-1g.10gb"})
	}
	beat := func(load int64) {
		t.Helper()
		var reps []busapi.ReplicaStatus
		for i, r := range f.desired(t).Replicas {
			st := busapi.ReplicaStatus{ID: r.ID, State: busapi.StateReady, Addr: "127.0.0.1:" + strconv.Itoa(9000+i)}
			if r.Endpoint == "other-ep" {
				st.DownloadMS, st.VerifyMS, st.LoadMS, st.WarmupMS = 2500, 300, load, 500
			}
			reps = append(reps, st)
		}
		f.heartbeat(t, inv, reps)
	}
	kept := func(want ...int64) {
		t.Helper()
		var got []int64
		if err := f.pool.QueryRow(t.Context(), `SELECT c.cold_starts_ms FROM version_cold_starts c JOIN model_versions v ON v.id = c.version_id WHERE v.name = 'v1'`).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Errorf("v1's cold starts = %v, want %v", got, want)
		}
	}
	beat(1700) // 5000 ms in all
	kept(1000, 7000, 3000, 2000, 5000)
	beat(1700) // the same again
	beat(0)    // the runtime's metrics not read this time
	beat(1700) // and read again
	kept(1000, 7000, 3000, 2000, 5000)

	// The endpoint goes to zero: its entry carries the budget and the
	// median.
	if _, err := f.pool.Exec(t.Context(), `UPDATE endpoints SET min_replicas = 0 WHERE name = 'other-ep'`); err != nil {
		t.Fatal(err)
	}
	f.reconcile(t)
	rt, _ := f.route(t, "other-ep")
	if !rt.ScaledToZero || rt.ColdStartBudgetS != route.DefaultColdStartBudgetGPU {
		t.Errorf("other-ep: scaled to zero %v, budget %d s; want true, %d s", rt.ScaledToZero, rt.ColdStartBudgetS, route.DefaultColdStartBudgetGPU)
	}
	if len(rt.Versions) != 1 || rt.Versions[0].ColdStartMS != 3000 {
		t.Errorf("other-ep versions = %+v, want v1 with the median cold start 3000 ms (of 1000 7000 3000 2000 5000)", rt.Versions)
	}
	// A policy's budget replaces the default (45.5 s rounds up to 46).
	if _, err := f.pool.Exec(t.Context(), `UPDATE endpoints SET autoscale_policy = '{"cold_start_budget_s": 45.5}' WHERE name = 'other-ep'`); err != nil {
		t.Fatal(err)
	}
	f.reconcile(t)
	if rt, _ = f.route(t, "other-ep"); rt.ColdStartBudgetS != 46 {
		t.Errorf("other-ep with a policy budget of 45.5 s: budget %d s; want 46", rt.ColdStartBudgetS)
	}
	fraud, _ := f.route(t, "fraud-ep")
	if fraud.ColdStartBudgetS != 0 || fraud.Versions[0].ColdStartMS != 0 {
		t.Errorf("fraud-ep (min 1) carries budget %d, cold start %d; want neither", fraud.ColdStartBudgetS, fraud.Versions[0].ColdStartMS)
	}

	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var count uint64
	var sum float64
	for _, mf := range families {
		if mf.GetName() != "modelplane_fleet_replica_cold_start_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			count += m.GetHistogram().GetSampleCount()
			sum += m.GetHistogram().GetSampleSum()
		}
	}
	if count != 1 || sum != 5 {
		t.Errorf("cold start histogram: %d samples summing to %v s, want the one of 5 s", count, sum)
	}
}
