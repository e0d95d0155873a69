package agent

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"testing"
	"time"

	"modelplane/busapi"
	"modelplane/internal/wait"
)

// sweepingDriver records the desired sets the agent hands a SimDriver as
// a DesiredSetter.
type sweepingDriver struct {
	*countingDriver
	mu   sync.Mutex
	sets [][]string // each call's replica ids
}

func (d *sweepingDriver) SetDesired(specs []busapi.ReplicaSpec) {
	ids := []string{}
	for _, s := range specs {
		ids = append(ids, s.ID)
	}
	d.mu.Lock()
	d.sets = append(d.sets, ids)
	d.mu.Unlock()
}

func (d *sweepingDriver) calls() [][]string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.sets)
}

// TestDriverHearsTheDesiredSetOnlyFromTheControlPlane: a DesiredSetter
// gets nothing before the first desired state of the agent's run, the
// set of each new generation, the set it holds again when the watch
// replays its generation (a restart with the state file), nothing for a
// stale one, and an empty set when the key is deleted.
func TestDriverHearsTheDesiredSetOnlyFromTheControlPlane(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	drv := &sweepingDriver{countingDriver: newCountingDriver(t)}
	cfg := testConfig(t, "node-sweep", drv)
	a := start(t, cfg, e.nc)
	wait.Eventually(t, 10*time.Second, func() bool { return a.Counters().HeartbeatsSent > 0 }, "no heartbeat")
	if got := drv.calls(); len(got) != 0 {
		t.Fatalf("before any desired state the driver heard %v, want nothing", got)
	}
	want := func(what string, sets ...[]string) {
		t.Helper()
		wait.Eventually(t, 10*time.Second, func() bool {
			return slices.EqualFunc(drv.calls(), sets, func(a, b []string) bool { return slices.Equal(a, b) })
		}, "%s: driver heard %v, want %v", what, wait.Show(func() any { return drv.calls() }), sets)
	}
	e.put(t, "node-sweep", 2, classifier("r1", 0), classifier("r2", 1))
	want("generation 2", []string{"r1", "r2"})
	ignored := a.Counters().DesiredIgnored
	e.put(t, "node-sweep", 1, classifier("r3", 2))
	wait.Eventually(t, 10*time.Second, func() bool { return a.Counters().DesiredIgnored == ignored+1 }, "stale generation not seen")
	want("a stale generation", []string{"r1", "r2"})
	e.put(t, "node-sweep", 3, classifier("r1", 0))
	want("generation 3", []string{"r1", "r2"}, []string{"r1"})
	allReady(t, a, "r1")

	// Restarted with its state file: the watch replays generation 3,
	// which the agent holds already.
	a.Stop()
	a2 := start(t, cfg, e.nc)
	want("the replay after a restart", []string{"r1", "r2"}, []string{"r1"}, []string{"r1"})

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := e.kv.Delete(ctx, "node-sweep"); err != nil {
		t.Fatal(err)
	}
	want("the key deleted", []string{"r1", "r2"}, []string{"r1"}, []string{"r1"}, []string{})
	wait.Eventually(t, 10*time.Second, func() bool { return len(replicas(a2)) == 0 }, "replicas left after the key was deleted")
}

// quotaDriver records the teams' quotas the agent hands a SimDriver as a
// QuotaSetter.
type quotaDriver struct {
	*countingDriver
	mu    sync.Mutex
	heard []map[string]map[string]float64
}

func (d *quotaDriver) SetTeamQuotas(q map[string]map[string]float64) {
	d.mu.Lock()
	d.heard = append(d.heard, q)
	d.mu.Unlock()
}

func (d *quotaDriver) calls() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.heard)
}

// TestQuotasHeardAgainAfterARestart: the state file keeps the desired set
// but not the teams' quotas, so an agent restarted with it hands the
// driver the quotas of the generation the watch replays; before, the
// driver had none until the next generation, and a namespace made then
// got no ResourceQuota.
func TestQuotasHeardAgainAfterARestart(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	quotas := map[string]map[string]float64{"fraud": {"A100-80GB": 2}}
	put := func(gen int64) {
		data, err := json.Marshal(busapi.Desired{Node: "node-quota", Generation: gen, Replicas: []busapi.ReplicaSpec{classifier("r1", 0)}, Quotas: quotas})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.kv.Put(t.Context(), "node-quota", data); err != nil {
			t.Fatal(err)
		}
	}
	drv := &quotaDriver{countingDriver: newCountingDriver(t)}
	cfg := testConfig(t, "node-quota", drv)
	a := start(t, cfg, e.nc)
	put(4)
	wait.Eventually(t, 10*time.Second, func() bool { return drv.calls() == 1 }, "quotas of generation 4 not heard")
	allReady(t, a, "r1")
	a.Stop()

	again := &quotaDriver{countingDriver: drv.countingDriver}
	cfg.Driver = again
	start(t, cfg, e.nc)
	wait.Eventually(t, 10*time.Second, func() bool { return again.calls() == 1 }, "the replayed generation's quotas not heard after the restart")
	again.mu.Lock()
	got := again.heard[0]
	again.mu.Unlock()
	if got["fraud"]["A100-80GB"] != 2 {
		t.Fatalf("quotas after the restart = %v, want %v", got, quotas)
	}
}
