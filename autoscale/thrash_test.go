package autoscale

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// fleet is an endpoint whose replicas take startDelay to become ready and
// leave at once, each serving up to capacity requests/s; what it cannot
// serve queues (a tenth of a second of the excess per replica).
type fleet struct {
	e          *endpoint
	readyAt    []time.Time
	startDelay time.Duration
	capacity   float64
	changes    []change
}

type change struct {
	at time.Duration
	up bool
}

func newFleet(p Policy, replicas int, capacity float64) *fleet {
	f := &fleet{e: newEndpoint(p, replicas), startDelay: 20 * time.Second, capacity: capacity}
	for range replicas {
		f.readyAt = append(f.readyAt, t0)
	}
	return f
}

// step evaluates once at total requests/s and applies the decision.
func (f *fleet) step(interval time.Duration, total float64) Decision {
	now := f.e.now
	ready := 0
	for _, at := range f.readyAt {
		if !at.After(now) {
			ready++
		}
	}
	var samples []Sample
	if ready > 0 {
		per := total / float64(ready)
		samples = replicas(ready, RPS, per, QueueDepth, math.Max(0, per-f.capacity)*0.1)
	}
	f.e.last = now
	d := f.e.eval(interval, samples, false)
	switch {
	case d.Desired > d.Current:
		for range d.Desired - d.Current {
			f.readyAt = append(f.readyAt, now.Add(f.startDelay))
		}
	case d.Desired < d.Current:
		f.readyAt = f.readyAt[:d.Desired] // the latest asked for go first
	}
	if d.Changed {
		f.changes = append(f.changes, change{now.Sub(t0), d.Desired > d.Current})
	}
	return d
}

// reversals counts, per 10-minute bucket, the changes whose direction
// differs from the change before.
func (f *fleet) reversals(total time.Duration) []int {
	out := make([]int, int(total/(10*time.Minute)))
	for i := 1; i < len(f.changes); i++ {
		if f.changes[i].up != f.changes[i-1].up {
			if b := int(f.changes[i].at / (10 * time.Minute)); b < len(out) {
				out[b]++
			}
		}
	}
	return out
}

// TestOscillatingLoadDoesNotMakeTheCountOscillate is walkthrough 3 as the
// issue states it: load moving ±20 % around a level (10,000 req/s on
// replicas targeted at 700 req/s, able to serve 1,000) for a simulated hour
// at one evaluation every 2 s changes the count at most once per direction
// reversal per 10 minutes.
func TestOscillatingLoadDoesNotMakeTheCountOscillate(t *testing.T) {
	t.Parallel()
	const level, hour = 10000.0, time.Hour
	shapes := []struct {
		name string
		load func(el time.Duration, r *rand.Rand) float64
	}{
		{"30 s high, 30 s low", func(el time.Duration, _ *rand.Rand) float64 {
			if el%time.Minute < 30*time.Second {
				return level * 1.2
			}
			return level * 0.8
		}},
		{"a sine of one minute", func(el time.Duration, _ *rand.Rand) float64 {
			return level * (1 + 0.2*math.Sin(2*math.Pi*el.Seconds()/60))
		}},
		{"a sine of two minutes", func(el time.Duration, _ *rand.Rand) float64 {
			return level * (1 + 0.2*math.Sin(2*math.Pi*el.Seconds()/120))
		}},
		{"uniform noise every evaluation", func(_ time.Duration, r *rand.Rand) float64 {
			return level * (0.8 + 0.4*r.Float64())
		}},
	}
	for _, sh := range shapes {
		t.Run(sh.name, func(t *testing.T) {
			t.Parallel()
			p := classic(1, 100)
			p.Signals = []Target{{RPS, 700}, {QueueDepth, 10}}
			f := newFleet(p, 15, 1000)
			r := rand.New(rand.NewPCG(1, 2))
			for el := time.Duration(0); el < hour; el += 2 * time.Second {
				f.step(2*time.Second, sh.load(el, r))
			}
			for b, n := range f.reversals(hour) {
				if n > 1 {
					t.Errorf("minutes %d-%d: %d reversals, want at most 1 (changes %v)", b*10, b*10+10, n, f.changes)
				}
			}
			if len(f.changes) > 3 {
				t.Errorf("%d changes in an hour, want the count to settle (changes %v)", len(f.changes), f.changes)
			}
			t.Logf("%d changes, final %d replicas", len(f.changes), f.e.current)
		})
	}
}

// TestLoadInsideTheToleranceChangesNothing: ±5 % around the level the
// count was sized for never moves it.
func TestLoadInsideTheToleranceChangesNothing(t *testing.T) {
	t.Parallel()
	p := classic(1, 100)
	p.Signals = []Target{{RPS, 700}, {QueueDepth, 10}}
	f := newFleet(p, 15, 1000)
	r := rand.New(rand.NewPCG(3, 4))
	for el := time.Duration(0); el < time.Hour; el += 2 * time.Second {
		f.step(2*time.Second, 15*700*(0.95+0.1*r.Float64()))
	}
	if len(f.changes) != 0 {
		t.Errorf("changes %v, want none", f.changes)
	}
}

// TestWalkthroughThreeBurstyTraffic is the seed's scenario: the fraud
// detector on 5 replicas (target 5,000 req/s each, real capacity 300)
// gets 2,000 req/s for 30 s, then 200 for 30 s, repeating. The queue the
// burst builds scales it up at the first evaluation; the count then holds
// through the 300 s window although requests/s alone would want one
// replica; the one scale-down after it at most halves the count.
func TestWalkthroughThreeBurstyTraffic(t *testing.T) {
	t.Parallel()
	p := classic(1, 100)
	p.Signals = []Target{{RPS, 5000}, {QueueDepth, 5}}
	f := newFleet(p, 5, 300)
	load := func(el time.Duration) float64 {
		if el%time.Minute < 30*time.Second {
			return 2000
		}
		return 200
	}
	d := f.step(15*time.Second, load(0))
	if !d.Changed || d.Desired <= 5 || d.Signal != QueueDepth {
		t.Fatalf("first burst: %d by %q, want a scale-up by queue_depth: %s", d.Desired, d.Signal, d.Reason)
	}
	up := d.Desired
	for el := 15 * time.Second; el < 30*time.Minute; el += 15 * time.Second {
		d := f.step(15*time.Second, load(el))
		if d.Desired < d.Current && el < 300*time.Second {
			t.Fatalf("at %v: scaled down to %d inside the window: %s", el, d.Desired, d.Reason)
		}
		if d.Desired < d.Current && d.Desired*2 < d.Current {
			t.Fatalf("at %v: %d → %d, more than halved", el, d.Current, d.Desired)
		}
	}
	t.Logf("scaled up to %d; changes %v", up, f.changes)
}

// TestWalkthroughThreeSettlesWithATargetNearCapacity: the same bursts with
// a requests/s target under what a replica can serve (250 of 300) keep the
// burst's replicas through every 30 s lull, because the burst's desire is
// always in the window: the first burst's overshoot (the queue wanted 10)
// is corrected once, to the 8 requests/s want, and nothing moves after.
func TestWalkthroughThreeSettlesWithATargetNearCapacity(t *testing.T) {
	t.Parallel()
	p := classic(1, 100)
	p.Signals = []Target{{RPS, 250}, {QueueDepth, 5}}
	f := newFleet(p, 5, 300)
	for el := time.Duration(0); el < time.Hour; el += 15 * time.Second {
		total := 200.0
		if el%time.Minute < 30*time.Second {
			total = 2000
		}
		f.step(15*time.Second, total)
	}
	for b, n := range f.reversals(time.Hour) {
		if n > 1 {
			t.Errorf("minutes %d-%d: %d reversals, want at most 1 (changes %v)", b*10, b*10+10, n, f.changes)
		}
	}
	if len(f.changes) != 2 || f.e.current != 8 {
		t.Errorf("changes %v, final %d; want up to 10, one correction to 8 and nothing after", f.changes, f.e.current)
	}
}
