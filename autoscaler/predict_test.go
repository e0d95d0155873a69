package autoscaler_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"modelplane/autoscale"
	"modelplane/autoscaler"
)

// TestPredictiveForecastRaisesTheCount: an endpoint whose policy has
// predictive on and a week and a day of history at 350 req/s every hour is
// raised to the forecast's 4 replicas although its one replica serves its
// target now; the history is read once and kept for the hour. Advisory
// only says what it would have asked.
func TestPredictiveForecastRaisesTheCount(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	inv := gpus(0, 1, "A100-80GB", seven1g())
	f.heartbeat(t, "node-a", inv)
	f.endpoint(t, "fraud-ep", "fraud", "v1", "mig-1g.10gb", "standard", 1)
	policy := func(mode string) {
		p := rpsPolicy(100, 1, 6, 10*time.Second)
		p.Predictive = mode
		if _, err := f.eps.SetAutoscaling(t.Context(), f.eng, "fraud-ep", p, f.fleet.Grace()); err != nil {
			t.Fatal(err)
		}
	}
	policy("advisory")
	reads := 0
	a := autoscaler.New(f.pool, autoscaler.Options{Clock: f.clock, Grace: f.fleet.Grace(), History: func(_ context.Context, endpoint string, _ int64, from, to time.Time) (autoscale.History, error) {
		reads++
		if endpoint != "fraud-ep" || to.Sub(from) < autoscale.MinHistory {
			t.Errorf("history of %s from %s to %s; want fraud-ep over at least a week", endpoint, from, to)
		}
		var h autoscale.History
		for at := to.Add(-8 * 24 * time.Hour).Truncate(time.Hour); at.Before(to); at = at.Add(time.Hour) {
			h = append(h, autoscale.HourRate{Hour: at, RPS: 350})
		}
		return h, nil
	}})
	f.reconcile(t)
	counts := map[string]int64{}
	f.serve(t, "node-a", inv, counts, 0)
	f.evaluate(t, a)
	// 200 requests in 2 s: 100 req/s, the target.
	f.clock.Advance(2 * time.Second)
	f.serve(t, "node-a", inv, counts, 200)
	if r := f.evaluate(t, a); len(r.Decisions) != 0 {
		t.Fatalf("advisory decided %+v; want no change", r.Decisions)
	}
	policy("on")
	f.clock.Advance(2 * time.Second)
	f.serve(t, "node-a", inv, counts, 200)
	d, ok := f.evaluate(t, a).Decisions["fraud-ep"]
	if !ok || d.Current != 1 || d.Desired != 4 || !strings.Contains(d.Reason, "predictive: forecast 350 req/s asks 4") {
		t.Fatalf("decision with predictive on = %+v; want 1 → 4 from the forecast", d)
	}
	if reads != 1 {
		t.Errorf("history read %d times in 4 s; want once (it is kept for an hour)", reads)
	}
}
