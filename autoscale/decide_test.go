package autoscale

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)

// replicas is n ready replicas each reporting the signal/value pairs kv.
func replicas(n int, kv ...any) []Sample {
	var m Sample
	for i := 0; i+1 < len(kv); i += 2 {
		m.Set(kv[i].(Signal), toFloat(kv[i+1]))
	}
	out := make([]Sample, n)
	for i := range out {
		out[i] = m
	}
	return out
}

func toFloat(v any) float64 {
	switch x := v.(type) {
	case int:
		return float64(x)
	case float64:
		return x
	}
	panic("not a number")
}

// classic is the seed's classic policy (requests/s 5000, queue 10) from
// min to max.
func classic(minR, maxR int) Policy {
	p := DefaultPolicy(TaskClassification, false, minR)
	p.MaxReplicas = maxR
	return p
}

func llm(minR, maxR int) Policy {
	p := DefaultPolicy(TaskLLM, true, minR)
	p.MaxReplicas = maxR
	return p
}

// TestOneDecision checks each rule that a single evaluation of a fresh
// endpoint shows.
func TestOneDecision(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		policy  Policy
		in      Input
		want    int
		signal  Signal
		reason  string // the reason, or a part of it
		changed bool
	}{
		{"desired is ceil(ready × mean / target)", classic(1, 100),
			Input{Current: 4, Ready: replicas(4, RPS, 7500, QueueDepth, 0)}, 6, RPS, "rps 7500/5000 → 4 → 6", true},
		{"the largest desire of the signals wins", llm(1, 100),
			Input{Current: 7, Ready: replicas(7, InFlight, 100, KVCache, 0.97, QueueDepth, 0, TokensPerSecond, 900)}, 8, KVCache, "kv_cache 0.97/0.85 → 7 → 8", true},
		{"a desire inside the tolerance band holds", classic(1, 100),
			Input{Current: 10, Ready: replicas(10, RPS, 5400)}, 10, RPS, "rps 5400/5000 → 10 → 10 (within tolerance 10%)", false},
		{"a desire just below the band holds too", classic(1, 100),
			Input{Current: 10, Ready: replicas(10, RPS, 4550)}, 10, RPS, "within tolerance 10%", false},
		{"a desire just past the band scales", classic(1, 100),
			Input{Current: 10, Ready: replicas(10, RPS, 5600)}, 12, RPS, "rps 5600/5000 → 10 → 12", true},
		{"a panic scale-up goes to the full desire at once, past the 4× cap", classic(1, 100),
			Input{Current: 2, Ready: replicas(2, RPS, 100, QueueDepth, 100)}, 20, QueueDepth, "panic: queue_depth 100/10 → 2 → 20", true},
		{"a panic scale-up is still clamped by max_replicas", classic(1, 12),
			Input{Current: 2, Ready: replicas(2, RPS, 100, QueueDepth, 100)}, 12, QueueDepth, "panic: queue_depth 100/10 → 2 → 12 (max 12)", true},
		{"outside panic scale-up is capped at 4× per decision", highPanic(classic(1, 100), 20),
			Input{Current: 2, Ready: replicas(2, RPS, 100, QueueDepth, 100)}, 8, QueueDepth, "queue_depth 100/10 → 2 → 8 (cap 4×)", true},
		{"scale-down is capped at 0.5× per decision", classic(1, 100),
			Input{Current: 10, Ready: replicas(10, RPS, 100, QueueDepth, 0)}, 5, RPS, "rps 100/5000 → 10 → 5 (cap 0.5×)", true},
		{"max_replicas clamps", classic(1, 20),
			Input{Current: 10, Ready: replicas(10, RPS, 15000)}, 20, RPS, "rps 15000/5000 → 10 → 20", true},
		{"min_replicas clamps", classic(3, 20),
			Input{Current: 3, Ready: replicas(3, RPS, 10)}, 3, RPS, "rps 10/5000 → 3 → 3", false},
		{"a count below a raised minimum goes up to it", classic(5, 20),
			Input{Current: 2, Ready: replicas(2, RPS, 5000, QueueDepth, 0)}, 5, RPS, "rps 5000/5000 → 2 → 5 (min 5)", true},
		{"a count above a lowered maximum comes down to it", classic(1, 4),
			Input{Current: 8, Ready: replicas(8, RPS, 5000, QueueDepth, 0)}, 4, RPS, "rps 5000/5000 → 8 → 4 (max 4)", true},
		{"no ready replica holds", classic(1, 20),
			Input{Current: 3}, 3, "", "no ready replica (3 starting): hold 3", false},
		{"no signals configured holds", Policy{MinReplicas: 1, MaxReplicas: 5, ScaleUpRate: 4, ScaleDownRate: 0.5, PanicThreshold: 2},
			Input{Current: 3, Ready: replicas(3, RPS, 1e6)}, 3, "", "no signals configured → 3 → 3", false},
		{"at zero without a wake nothing starts", classic(0, 20),
			Input{Current: 0}, 0, "", "at zero, no request waiting: hold 0", false},
		{"at zero a wake starts one replica", classic(0, 20),
			Input{Current: 0, Wake: true}, 1, "", "wake: a request is waiting → 0 → 1", true},
		{"at zero a minimum above zero starts it", classic(2, 20),
			Input{Current: 0}, 2, "", "min_replicas 2 → 0 → 2", true},
		{"a fraction formats with two decimals", llm(1, 100),
			Input{Current: 3, Ready: replicas(3, KVCache, 0.1234, InFlight, 1, QueueDepth, 0, TokensPerSecond, 0)}, 2, KVCache, "kv_cache 0.12/0.85 → 3 → 2 (cap 0.5×)", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := deciding(t0)
			tt.in.Now = t0
			d := s.Decide(&tt.policy, tt.in)
			if d.Desired != tt.want || d.Changed != tt.changed || d.Signal != tt.signal {
				t.Errorf("desired %d changed %v signal %q, want %d %v %q (%s)", d.Desired, d.Changed, d.Signal, tt.want, tt.changed, tt.signal, d.Reason)
			}
			if !strings.Contains(d.Reason, tt.reason) {
				t.Errorf("reason = %q, want it to contain %q", d.Reason, tt.reason)
			}
			if d.Current != tt.in.Current || len(d.Readings) != len(tt.policy.Signals) && tt.in.Current > 0 {
				t.Errorf("decision inputs: current %d, %d readings; want %d and one per signal", d.Current, len(d.Readings), tt.in.Current)
			}
		})
	}
}

// endpoint drives one endpoint through evaluations: every eval applies the
// decision at once (every replica ready, unless starting says otherwise).
type endpoint struct {
	p       Policy
	s       State
	now     time.Time
	current int
	last    time.Time // LastRequest
}

func newEndpoint(p Policy, current int) *endpoint {
	return &endpoint{p: p, now: t0, current: current, last: t0}
}

// eval evaluates at the endpoint's time with ready reporting per replica,
// moves to the decided count and then advances the clock by step.
func (e *endpoint) eval(step time.Duration, ready []Sample, wake bool) Decision {
	d := e.s.Decide(&e.p, Input{Now: e.now, Current: e.current, Ready: ready, Wake: wake, LastRequest: e.last})
	e.current = d.Desired
	e.now = e.now.Add(step)
	return d
}

// load is n ready replicas sharing total requests/s evenly (no queue).
func load(n int, total float64) []Sample {
	return replicas(n, RPS, total/float64(n), QueueDepth, 0)
}

func TestScaleDownWaitsForTheWindowAndTakesItsHighestDesire(t *testing.T) {
	t.Parallel()
	e := newEndpoint(classic(1, 100), 10)
	// Desires: 10 at t0, 8 from t+2 s to t+118 s, then 4; every 2 s.
	for e.now.Before(t0.Add(300 * time.Second)) {
		total := 50000.0
		switch el := e.now.Sub(t0); {
		case el >= 120*time.Second:
			total = 20000
		case el > 0:
			total = 40000
		}
		if d := e.eval(2*time.Second, load(e.current, total), false); d.Changed {
			t.Fatalf("at %v: scaled to %d inside the 300 s window: %s", e.now.Sub(t0), d.Desired, d.Reason)
		}
	}
	// At t+300 s the desire of 10 at t0 has left the window; the highest
	// left is 8.
	d := e.eval(2*time.Second, load(e.current, 20000), false)
	if d.Desired != 8 {
		t.Fatalf("at +300s desired %d, want 8 (the highest desire in the window): %s", d.Desired, d.Reason)
	}
	if want := "rps 2000/5000 → 10 → 8 (down window 5m0s holds 8)"; d.Reason != want {
		t.Errorf("reason = %q, want %q", d.Reason, want)
	}
	// The desire of 8 leaves the window 300 s after t+118 s (its last
	// time); then 4.
	for e.now.Before(t0.Add(418 * time.Second)) {
		if d := e.eval(2*time.Second, load(e.current, 20000), false); d.Changed {
			t.Fatalf("at %v: scaled to %d while 8 was in the window: %s", e.now.Sub(t0), d.Desired, d.Reason)
		}
	}
	if d := e.eval(2*time.Second, load(e.current, 20000), false); d.Desired != 4 {
		t.Errorf("at +418s desired %d, want 4: %s", d.Desired, d.Reason)
	}
}

// TestScaleDownToTheMeanFollowsANoisyDeclineSooner runs one noisy decline
// (10 replicas of load down to 5 in 300 s, ±4 % every other evaluation)
// under both scale-down bases: the mean follows it with fewer
// replica-seconds than the peak, and neither runs below the load.
func TestScaleDownToTheMeanFollowsANoisyDeclineSooner(t *testing.T) {
	t.Parallel()
	seconds := map[ScaleDownBasis]float64{}
	for _, basis := range []ScaleDownBasis{ScaleDownPeak, ScaleDownMean} {
		p := classic(1, 100)
		p.Tolerance, p.ScaleDownStabilization, p.ScaleDownBasis = 0.05, 120*time.Second, basis
		e := newEndpoint(p, 10)
		for k := 0; k < 300; k++ {
			el := e.now.Sub(t0).Seconds()
			replicasOfLoad := 10 - 5*min(el, 300)/300
			noise := 1.04
			if k%2 == 1 {
				noise = 0.96
			}
			before := e.current
			d := e.eval(2*time.Second, load(e.current, 5000*replicasOfLoad*noise), false)
			if float64(d.Desired) < replicasOfLoad {
				t.Fatalf("%s at %vs: %d replicas for a load of %.2f: %s", basis, el, d.Desired, replicasOfLoad, d.Reason)
			}
			seconds[basis] += 2 * float64(before)
		}
		if e.current != 6 {
			t.Errorf("%s: %d replicas at the end of the decline to 5, want 6 (5 with the tolerance's margin)", basis, e.current)
		}
	}
	if seconds[ScaleDownMean] >= 0.97*seconds[ScaleDownPeak] {
		t.Errorf("replica-seconds: mean %v, peak %v; want the mean at least 3 %% below", seconds[ScaleDownMean], seconds[ScaleDownPeak])
	}
}

func TestScaleDownToTheMeanWaitsAWindowAfterAScaleUp(t *testing.T) {
	t.Parallel()
	p := classic(1, 100)
	p.ScaleDownStabilization, p.ScaleDownBasis = 60*time.Second, ScaleDownMean
	e := newEndpoint(p, 4)
	if d := e.eval(2*time.Second, load(4, 30000), false); d.Desired != 6 {
		t.Fatalf("1.5× the count: %d, want 6: %s", d.Desired, d.Reason)
	}
	// Back to 4 replicas of load at once: held for the window after the
	// scale-up, though the mean would allow 5 sooner.
	for e.now.Before(t0.Add(60 * time.Second)) {
		if d := e.eval(2*time.Second, load(e.current, 20000), false); d.Changed {
			t.Fatalf("at %v: scaled to %d within a window of the scale-up: %s", e.now.Sub(t0), d.Desired, d.Reason)
		} else if !strings.Contains(d.Reason, "scaled up") {
			t.Fatalf("at %v: reason %q does not say the scale-up holds", e.now.Sub(t0), d.Reason)
		}
	}
	// The scale-up's load has left the window: its mean is 4, with the
	// 10 % tolerance 4.4, below 6 by more than the tolerance.
	d := e.eval(2*time.Second, load(e.current, 20000), false)
	if want := "rps 3333/5000 → 6 → 5 (mean load 4 over 1m0s holds 5)"; d.Reason != want {
		t.Errorf("reason = %q, want %q", d.Reason, want)
	}
}

func TestScaleUpWindowTakesTheLowestDesireAndPanicSkipsIt(t *testing.T) {
	t.Parallel()
	p := classic(1, 100)
	p.ScaleUpStabilization = 60 * time.Second
	p.ScaleDownStabilization = 120 * time.Second
	e := newEndpoint(p, 4)
	e.eval(2*time.Second, load(4, 20000), false) // desire 4
	// 1.5×: not panic; the up window holds the count for 60 s.
	for range 29 {
		if d := e.eval(2*time.Second, load(e.current, 30000), false); d.Changed || d.Panic {
			t.Fatalf("at %v: %d (panic %v) before the up window passed: %s", e.now.Sub(t0), d.Desired, d.Panic, d.Reason)
		}
	}
	if d := e.eval(2*time.Second, load(e.current, 30000), false); d.Desired != 6 {
		t.Fatalf("after 60 s of 1.5×: %d, want 6: %s", d.Desired, d.Reason)
	}
	// 2.5× of 6 is panic: at once, past the up window.
	d := e.eval(2*time.Second, load(e.current, 75000), false)
	if !d.Panic || d.Desired != 15 || !strings.HasPrefix(d.Reason, "panic: rps") {
		t.Fatalf("burst: desired %d panic %v, want 15 in panic: %s", d.Desired, d.Panic, d.Reason)
	}
	panicAt := e.now.Add(-2 * time.Second)
	// The load falls back: panic holds the count until a full scale-down
	// window has passed since the last panic-level desire.
	for e.now.Before(panicAt.Add(120 * time.Second)) {
		d := e.eval(2*time.Second, load(e.current, 10000), false)
		if d.Changed || !d.Panic {
			t.Fatalf("at %v after panic: %d panic %v, want 15 in panic: %s", e.now.Sub(panicAt), d.Desired, d.Panic, d.Reason)
		}
	}
	if d := e.eval(2*time.Second, load(e.current, 10000), false); d.Panic || d.Desired != 8 {
		t.Errorf("a window after the panic: %d panic %v, want 8 (ceil of half, capped) out of panic: %s", d.Desired, d.Panic, d.Reason)
	}
}

// TestStartingReplicasAreCapacityNotLoad: after a scale-up the new
// replicas are starting and report nothing; the load is measured on the
// ready ones and the count compared with all, so neither a second
// scale-up (starting not counted as capacity) nor an overshoot (starting
// counted as loaded like the ready ones) nor a scale-down follows
// (ray#18925).
func TestStartingReplicasAreCapacityNotLoad(t *testing.T) {
	t.Parallel()
	e := newEndpoint(classic(1, 100), 4)
	if d := e.eval(2*time.Second, load(4, 40000), false); d.Desired != 8 {
		t.Fatalf("first: %d, want 8: %s", d.Desired, d.Reason)
	}
	// 4 ready carry 40,000 req/s; 4 are starting.
	for i := range 10 {
		d := e.eval(2*time.Second, load(4, 40000), false)
		if d.Changed || d.Starting != 4 || d.Ready != 4 {
			t.Fatalf("evaluation %d while 4 start: %d (ready %d, starting %d), want 8 held: %s", i, d.Desired, d.Ready, d.Starting, d.Reason)
		}
	}
	// All 8 ready share the load: on target.
	if d := e.eval(2*time.Second, load(8, 40000), false); d.Changed {
		t.Fatalf("all ready: %d, want 8: %s", d.Desired, d.Reason)
	}
}

func TestMissingSignalHoldsThenFreezesAndResumes(t *testing.T) {
	t.Parallel()
	e := newEndpoint(llm(1, 100), 10)
	noKV := replicas(10, InFlight, 20, QueueDepth, 0, TokensPerSecond, 100) // desire 1 from the others
	for i := range MissingEvaluations - 1 {
		d := e.eval(2*time.Second, noKV, false)
		if d.Changed || d.Frozen || d.Event != "" || !strings.Contains(d.Reason, "kv_cache missing: no scale-down") {
			t.Fatalf("evaluation %d without kv_cache: %d frozen %v event %q: %s; want a held count", i, d.Desired, d.Frozen, d.Event, d.Reason)
		}
	}
	d := e.eval(2*time.Second, noKV, false)
	if !d.Frozen || d.Changed || d.Event != "autoscaling frozen: kv_cache missing from every ready replica for 3 evaluations" {
		t.Fatalf("third evaluation: frozen %v desired %d event %q, want frozen at 10 with the event", d.Frozen, d.Desired, d.Event)
	}
	// Frozen even when another signal asks for more; the event is raised once.
	hot := replicas(10, InFlight, 400, QueueDepth, 0, TokensPerSecond, 100)
	if d := e.eval(2*time.Second, hot, false); !d.Frozen || d.Changed || d.Event != "" {
		t.Fatalf("frozen: %v desired %d event %q, want still frozen at 10, no new event: %s", d.Frozen, d.Desired, d.Event, d.Reason)
	}
	// One replica reports kv_cache again: resumed.
	back := replicas(10, InFlight, 400, QueueDepth, 0, TokensPerSecond, 100)
	back[3].Set(KVCache, 0.5)
	d = e.eval(2*time.Second, back, false)
	if d.Frozen || d.Desired != 20 || !strings.HasPrefix(d.Event, "autoscaling resumed") {
		t.Errorf("resumed: frozen %v desired %d event %q, want 20 and the event: %s", d.Frozen, d.Desired, d.Event, d.Reason)
	}
}

// A freeze names why the replicas did not report the signal, as their
// Samples say: each distinct reason once, at most three and a count.
func TestFreezeSaysWhyTheSignalIsMissing(t *testing.T) {
	t.Parallel()
	e := newEndpoint(llm(1, 100), 5)
	noKV := replicas(5, InFlight, 20, QueueDepth, 0, TokensPerSecond, 100)
	for i := range noKV {
		noKV[i].Missing(KVCache, fmt.Sprintf("kv_used_pct not reported by replica r-%d (llama-server)", i%4))
	}
	noKV[0].Missing(InFlight, "not used: in_flight is reported")
	var d Decision
	for range MissingEvaluations {
		d = e.eval(2*time.Second, noKV, false)
	}
	want := "autoscaling frozen: kv_cache missing from every ready replica for 3 evaluations (kv_used_pct not reported by replica r-0 (llama-server); " +
		"kv_used_pct not reported by replica r-1 (llama-server); kv_used_pct not reported by replica r-2 (llama-server); and 1 more)"
	if !d.Frozen || d.Event != want {
		t.Fatalf("freeze event = %q, want %q", d.Event, want)
	}
	if !strings.HasPrefix(d.Reason, "frozen: kv_cache missing from every ready replica for 3 evaluations (kv_used_pct not reported by replica r-0") {
		t.Errorf("reason = %q, want the freeze with its why", d.Reason)
	}
}

func TestAMissingSignalScalesUpOnTheOthers(t *testing.T) {
	t.Parallel()
	e := newEndpoint(llm(1, 100), 4)
	d := e.eval(2*time.Second, replicas(4, InFlight, 400, QueueDepth, 0, TokensPerSecond, 100), false)
	if d.Desired != 8 || d.Signal != InFlight {
		t.Errorf("desired %d by %q, want 8 by in_flight: %s", d.Desired, d.Signal, d.Reason)
	}
}

func TestZeroReplicasNeverFreezeAndOnlyAWakeStarts(t *testing.T) {
	t.Parallel()
	e := newEndpoint(llm(0, 100), 0)
	for i := range 10 {
		if d := e.eval(2*time.Second, nil, false); d.Frozen || d.Changed {
			t.Fatalf("evaluation %d at zero: frozen %v desired %d: %s", i, d.Frozen, d.Desired, d.Reason)
		}
	}
	if d := e.eval(2*time.Second, nil, true); d.Desired != 1 || d.Frozen {
		t.Fatalf("wake: %d frozen %v, want 1: %s", d.Desired, d.Frozen, d.Reason)
	}
	// Starting: no sample yet, nothing missing.
	for i := range 5 {
		if d := e.eval(2*time.Second, nil, false); d.Frozen || d.Desired != 1 {
			t.Fatalf("starting %d: %d frozen %v: %s", i, d.Desired, d.Frozen, d.Reason)
		}
	}
}

func TestScaleToZeroAfterTheGraceWithoutRequests(t *testing.T) {
	t.Parallel()
	e := newEndpoint(classic(0, 10), 1)
	idle := replicas(1, RPS, 0, QueueDepth, 0)
	e.last = t0
	for e.now.Before(t0.Add(900 * time.Second)) {
		if d := e.eval(10*time.Second, idle, false); d.Changed {
			t.Fatalf("at %v: %d before the grace: %s", e.now.Sub(t0), d.Desired, d.Reason)
		}
	}
	d := e.eval(10*time.Second, idle, false)
	if d.Desired != 0 || d.Reason != "no request for 15m0s (grace 15m0s) → 1 → 0" {
		t.Fatalf("after the grace: %d %q, want 0", d.Desired, d.Reason)
	}
	// At zero: only a wake brings it back, without a freeze.
	if d := e.eval(10*time.Second, nil, false); d.Desired != 0 {
		t.Fatalf("at zero: %d", d.Desired)
	}
	if d := e.eval(10*time.Second, nil, true); d.Desired != 1 {
		t.Fatalf("wake: %d, want 1", d.Desired)
	}
}

func TestWorkOnAReplicaPostponesScaleToZero(t *testing.T) {
	t.Parallel()
	e := newEndpoint(classic(0, 10), 1)
	// No request seen by the gateways, but at +600 s a stream is in flight.
	e.last = time.Time{}
	e.p.Signals = append(e.p.Signals, Target{InFlight, 8})
	for e.now.Before(t0.Add(1500 * time.Second)) {
		ready := replicas(1, RPS, 0, QueueDepth, 0, InFlight, 0)
		if e.now.Equal(t0.Add(600 * time.Second)) {
			ready = replicas(1, RPS, 0, QueueDepth, 0, InFlight, 1)
		}
		if d := e.eval(10*time.Second, ready, false); d.Changed {
			t.Fatalf("at %v: %d, want 1 until 900 s after the stream: %s", e.now.Sub(t0), d.Desired, d.Reason)
		}
	}
	if d := e.eval(10*time.Second, replicas(1, RPS, 0, QueueDepth, 0, InFlight, 0), false); d.Desired != 0 {
		t.Errorf("900 s after the stream: %d, want 0: %s", d.Desired, d.Reason)
	}
}

func TestMinimumAboveZeroNeverScalesToZero(t *testing.T) {
	t.Parallel()
	e := newEndpoint(classic(1, 10), 1)
	for range 200 {
		if d := e.eval(10*time.Second, replicas(1, RPS, 0, QueueDepth, 0), false); d.Desired != 1 {
			t.Fatalf("at %v: %d, want 1: %s", e.now.Sub(t0), d.Desired, d.Reason)
		}
	}
}

func TestDecisionKeepsItsInputs(t *testing.T) {
	t.Parallel()
	var s State
	p := llm(1, 100)
	ready := replicas(3, InFlight, 150, KVCache, 0.9, QueueDepth, 2, TokensPerSecond, 1500)
	ready = append(ready, Sample{}) // a ready replica that reported nothing
	d := s.Decide(&p, Input{Now: t0, Current: 5, Ready: ready})
	want := []Reading{
		{Signal: InFlight, Target: 200, Value: 150, Replicas: 3, Desired: 3},
		{Signal: KVCache, Target: 0.85, Value: 0.9, Replicas: 3, Desired: 5},
		{Signal: QueueDepth, Target: 4, Value: 2, Replicas: 3, Desired: 2},
		{Signal: TokensPerSecond, Target: 2000, Value: 1500, Replicas: 3, Desired: 3},
	}
	for i, r := range d.Readings {
		if r != want[i] {
			t.Errorf("reading %d = %+v, want %+v", i, r, want[i])
		}
	}
	if d.Ready != 4 || d.Starting != 1 || d.Current != 5 || d.At != t0 {
		t.Errorf("ready %d starting %d current %d at %v, want 4, 1, 5, %v", d.Ready, d.Starting, d.Current, d.At, t0)
	}
}

func TestDecideIsDeterministic(t *testing.T) {
	t.Parallel()
	run := func() []Decision {
		e := newEndpoint(llm(1, 50), 3)
		var out []Decision
		for i := range 400 {
			v := float64(100 + (i*37)%300)
			out = append(out, e.eval(2*time.Second, replicas(e.current, InFlight, v, KVCache, 0.5, QueueDepth, 0, TokensPerSecond, 10), false))
		}
		return out
	}
	a, b := run(), run()
	for i := range a {
		if a[i].Desired != b[i].Desired || a[i].Reason != b[i].Reason {
			t.Fatalf("evaluation %d differs: %q vs %q", i, a[i].Reason, b[i].Reason)
		}
	}
}

// highPanic is p with panic starting only at threshold × the current count,
// so that the up rate cap binds below it.
func highPanic(p Policy, threshold float64) Policy {
	p.PanicThreshold = threshold
	return p
}

// TestBacklogRaisesOnlyWhileItGrowsWithNothingStarting replays burst's
// overshoot: a queue that builds on the old replicas scales up once, and
// neither keeps growing while the new replicas start nor, draining once
// they are ready, asks for more; a queue that grows again does.
func TestBacklogRaisesOnlyWhileItGrowsWithNothingStarting(t *testing.T) {
	var s State
	p := llm(1, 100)
	at := func(sec int) time.Time { return t0.Add(time.Duration(sec) * time.Second) }
	load := func(n int, queue float64) []Sample {
		return replicas(n, InFlight, 20, KVCache, 0.85, QueueDepth, queue, TokensPerSecond, 500)
	}
	steps := []struct {
		sec, current, ready int
		queue               float64
		want                int
		held                bool
	}{
		{0, 4, 4, 0.5, 4, false},    // idle
		{2, 4, 4, 10.5, 11, false},  // the burst: growing, nothing starting
		{4, 11, 4, 27, 11, true},    // 7 starting: no second scale-up to 28
		{50, 11, 11, 8, 11, true},   // ready, the backlog drains: no more
		{52, 11, 11, 12, 33, false}, // growing again with nothing starting
	}
	for _, st := range steps {
		d := s.Decide(&p, Input{Now: at(st.sec), Current: st.current, Ready: load(st.ready, st.queue)})
		q := d.Readings[2]
		if q.Signal != QueueDepth || d.Desired != st.want || q.Held != st.held {
			t.Fatalf("at %ds: desired %d held %v (%s), want %d held %v", st.sec, d.Desired, q.Held, d.Reason, st.want, st.held)
		}
		if st.held && !strings.Contains(d.Reason, "backlog held") {
			t.Errorf("at %ds: reason %q does not say the backlog is held", st.sec, d.Reason)
		}
	}
}

// deciding is a state that has decided since an hour before now, with
// nothing in its windows: a decision of it is one a full window makes.
func deciding(now time.Time) State { return State{first: now.Add(-time.Hour).UnixNano()} }

// A new state (a new leader, a changed policy, a simulation's start) takes
// nothing away for a scale-down window after its first evaluation: it
// scales up, and goes to zero after the idle grace, at once.
func TestNothingScalesDownWithinTheFirstWindow(t *testing.T) {
	t.Parallel()
	p := classic(0, 20)
	p.ScaleToZeroGrace = time.Minute
	low := func(at time.Duration) Input {
		return Input{Now: t0.Add(at), Current: 8, Ready: replicas(8, RPS, 100, QueueDepth, 0), LastRequest: t0.Add(at)}
	}
	var s State
	for _, at := range []time.Duration{0, 2 * time.Second, p.ScaleDownStabilization - time.Second} {
		if d := s.Decide(&p, low(at)); d.Desired != 8 || d.Changed || !strings.Contains(d.Reason, "no scale-down within the first window 5m0s") {
			t.Errorf("at %s: desired %d (%s), want 8 held", at, d.Desired, d.Reason)
		}
	}
	if d := s.Decide(&p, low(p.ScaleDownStabilization)); d.Desired >= 8 || !d.Changed {
		t.Errorf("a window after the first evaluation: desired %d (%s), want fewer than 8", d.Desired, d.Reason)
	}
	var up State
	if d := up.Decide(&p, Input{Now: t0, Current: 2, Ready: replicas(2, RPS, 9000, QueueDepth, 0)}); d.Desired <= 2 {
		t.Errorf("first evaluation under load: desired %d (%s), want a scale-up", d.Desired, d.Reason)
	}
	var idle State
	idle.Decide(&p, Input{Now: t0, Current: 2, Ready: replicas(2, RPS, 0, QueueDepth, 0)})
	if d := idle.Decide(&p, Input{Now: t0.Add(2 * time.Minute), Current: 2, Ready: replicas(2, RPS, 0, QueueDepth, 0)}); d.Desired != 0 {
		t.Errorf("idle past the grace within the first window: desired %d (%s), want 0", d.Desired, d.Reason)
	}
}
