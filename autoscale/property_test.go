package autoscale

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// TestDecisionsStayWithinTheirBounds drives random valid policies through
// random loads and checks the bounds every decision must keep: within
// min/max (or 0 only by the grace rule), never past a rate cap unless
// min/max demand it, and never a change while frozen.
func TestDecisionsStayWithinTheirBounds(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(7, 16))
	for trial := range 200 {
		task := []Task{TaskClassification, TaskLLM}[r.IntN(2)]
		p := DefaultPolicy(task, true, r.IntN(3))
		p.MaxReplicas = p.MinReplicas + 1 + r.IntN(60)
		p.ScaleUpRate = 1 + 4*r.Float64()
		p.ScaleDownRate = 0.1 + 0.9*r.Float64()
		p.Tolerance = 0.3 * r.Float64()
		p.ScaleUpStabilization = time.Duration(r.IntN(3)) * 30 * time.Second
		p.ScaleDownStabilization = time.Duration(r.IntN(4)) * 60 * time.Second
		p.ScaleToZeroGrace = time.Duration(1+r.IntN(5)) * time.Minute
		if err := p.Validate(task, true); err != nil {
			t.Fatalf("trial %d: generated an invalid policy: %v", trial, err)
		}
		var s State
		now, current := t0, p.MinReplicas
		for i := range 300 {
			ready := make([]Sample, r.IntN(current+1))
			quiet := r.IntN(4) == 0
			for j := range ready {
				for _, tg := range p.Signals {
					if r.IntN(20) == 0 {
						continue // sometimes a replica misses a signal
					}
					v := tg.Target * 3 * r.Float64()
					if quiet {
						v = 0
					}
					ready[j].Set(tg.Signal, v)
				}
			}
			in := Input{Now: now, Current: current, Ready: ready, Wake: r.IntN(10) == 0}
			d := s.Decide(&p, in)
			floor := max(p.MinReplicas, 1)
			switch {
			case d.Desired < 0 || d.Desired > max(p.MaxReplicas, current):
				t.Fatalf("trial %d step %d: %d outside [0, %d]: %s", trial, i, d.Desired, p.MaxReplicas, d.Reason)
			case d.Desired == 0 && current > 0 && p.MinReplicas > 0:
				t.Fatalf("trial %d step %d: to zero with min_replicas %d: %s", trial, i, p.MinReplicas, d.Reason)
			case d.Frozen && d.Changed:
				t.Fatalf("trial %d step %d: changed while frozen: %s", trial, i, d.Reason)
			case d.Panic && d.Desired > current && d.Desired > d.Recommended:
				t.Fatalf("trial %d step %d: panic %d → %d past the recommendation %d: %s", trial, i, current, d.Desired, d.Recommended, d.Reason)
			case !d.Panic && current >= floor && current <= p.MaxReplicas && d.Desired > current &&
				d.Desired > int(math.Ceil(float64(current)*p.ScaleUpRate-1e-9)):
				t.Fatalf("trial %d step %d: %d → %d past the up cap %v: %s", trial, i, current, d.Desired, p.ScaleUpRate, d.Reason)
			case current >= floor && current <= p.MaxReplicas && d.Desired > 0 && d.Desired < current &&
				d.Desired < max(1, int(math.Ceil(float64(current)*p.ScaleDownRate-1e-9))):
				t.Fatalf("trial %d step %d: %d → %d past the down cap %v: %s", trial, i, current, d.Desired, p.ScaleDownRate, d.Reason)
			case d.Reason == "":
				t.Fatalf("trial %d step %d: no reason", trial, i)
			}
			current = d.Desired
			now = now.Add(time.Duration(1+r.IntN(10)) * time.Second)
		}
	}
}
