package autoscale

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestFitLineRecoversALine(t *testing.T) {
	t.Parallel()
	now := t0.UnixNano()
	pt := func(secAgo, x float64) loadAt { return loadAt{now - int64(secAgo*1e9), x} }
	tests := []struct {
		name         string
		pts          []loadAt
		level, slope float64
		ok           bool
	}{
		{"a rising line", []loadAt{pt(60, 8), pt(40, 9), pt(20, 10), pt(0, 11)}, 11, 0.05, true},
		{"a falling line, unevenly spaced", []loadAt{pt(90, 20), pt(30, 17), pt(10, 16), pt(4, 15.7)}, 15.5, -0.05, true},
		{"a level", []loadAt{pt(6, 7), pt(4, 7), pt(2, 7), pt(0, 7)}, 7, 0, true},
		{"noise around a climb", []loadAt{pt(60, 9), pt(40, 9), pt(20, 11), pt(0, 11)}, 11.2, 0.04, true},
		{"two points are no trend", []loadAt{pt(2, 1), pt(0, 2)}, 0, 0, false},
		{"three at one instant are no trend", []loadAt{pt(0, 1), pt(0, 2), pt(0, 3)}, 0, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			level, slope, ok := fitLine(tt.pts, now)
			if ok != tt.ok || math.Abs(level-tt.level) > 1e-9 || math.Abs(slope-tt.slope) > 1e-9 {
				t.Errorf("fitLine = %v, %v, %v; want %v, %v, %v", level, slope, ok, tt.level, tt.slope, tt.ok)
			}
		})
	}
}

func TestTrendNeedsHalfAWindowAndForgetsWhatIsOlder(t *testing.T) {
	t.Parallel()
	var s State
	at := func(sec int) int64 { return t0.Add(time.Duration(sec) * time.Second).UnixNano() }
	for sec := 0; sec < 60; sec += 2 {
		if _, _, ok := s.trend(0, at(sec), float64(sec)); ok {
			t.Fatalf("a trend after %ds of history, want none before %s", sec, TrendWindow/2)
		}
	}
	if _, slope, ok := s.trend(0, at(60), 60); !ok || math.Abs(slope-1) > 1e-9 {
		t.Fatalf("after 60s: slope %v ok %v, want 1 per second", slope, ok)
	}
	// A level after the climb: once the climb has left the window the line
	// is flat.
	for sec := 62; sec <= 60+int(TrendWindow.Seconds()); sec += 2 {
		s.trend(0, at(sec), 60)
	}
	if level, slope, ok := s.trend(0, at(182), 60); !ok || slope != 0 || level != 60 {
		t.Errorf("two minutes into a level: level %v slope %v ok %v, want 60, 0, true", level, slope, ok)
	}
	if n := len(s.trends[0]); n != int(TrendWindow/(2*time.Second)) {
		t.Errorf("%d points kept, want the window's %d", n, int(TrendWindow/(2*time.Second)))
	}
}

// climb is a request rate rising from 10 replicas' worth at the target
// (5,000 req/s each) by 0.5 replica a minute, evaluated every 2 s until
// until: a climb like the seed day's.
func climb(p Policy, until time.Duration) (*endpoint, Decision) {
	e := newEndpoint(p, 10)
	var d Decision
	for e.now.Before(t0.Add(until)) {
		el := e.now.Sub(t0).Minutes()
		d = e.eval(2*time.Second, load(e.current, 5000*(10+0.5*el)), false)
	}
	return e, d
}

func TestATrendScalesUpAheadOfAClimb(t *testing.T) {
	t.Parallel()
	off := classic(1, 100)
	on := off
	on.TrendHorizon = 60 * time.Second
	// Until two minutes in the load stays within the 10 % band of 10:
	// without the trend nothing moves; with it the load a minute ahead
	// leaves the band about a minute in (10.5 + 0.5) and asks for more.
	eOff, dOff := climb(off, 2*time.Minute)
	eOn, dOn := climb(on, 2*time.Minute)
	if eOff.current != 10 {
		t.Errorf("without a trend: %d replicas two minutes into the climb, want 10: %s", eOff.current, dOff.Reason)
	}
	if eOn.current <= eOff.current || eOn.current > 12 {
		t.Errorf("with a trend: %d replicas two minutes into the climb, want 11 or 12: %s", eOn.current, dOn.Reason)
	}
	var r Reading
	for _, x := range dOn.Readings {
		if x.Signal == RPS {
			r = x
		}
	}
	if math.Abs(r.Trend-0.5) > 0.01 || r.Forecast <= 11 {
		t.Errorf("rps reading: trend %v/min, forecast %v; want 0.5/min and above the load of 11", r.Trend, r.Forecast)
	}
	// The scale-up that followed the trend says so.
	found := false
	e := newEndpoint(on, 10)
	for e.now.Before(t0.Add(2 * time.Minute)) {
		el := e.now.Sub(t0).Minutes()
		if d := e.eval(2*time.Second, load(e.current, 5000*(10+0.5*el)), false); d.Changed {
			found = true
			if !strings.Contains(d.Reason, "(trend +0.5/min: ") || !strings.Contains(d.Reason, " in 1m0s) → 10 → ") {
				t.Errorf("reason %q does not name the trend", d.Reason)
			}
			break
		}
	}
	if !found {
		t.Error("no scale-up on the trend within two minutes")
	}
}

func TestATrendNeverPanicsAndAsksAtMostTheToleranceAboveTheLoad(t *testing.T) {
	t.Parallel()
	p := classic(1, 100)
	p.TrendHorizon = 10 * time.Minute
	// A 10-minute up window keeps the count at 10 while the load ramps
	// from 10 to 19 replicas in 90 s: ten minutes of its slope would be
	// 60 more. The forecast stays within the tolerance above the load,
	// and panic (at 20, twice the count) is judged on the load measured,
	// not on the forecast (19 × 1.1 would be past it).
	p.ScaleUpStabilization = 10 * time.Minute
	e := newEndpoint(p, 10)
	for k := 0; k <= 45; k++ {
		x := 10 + 0.2*float64(k)
		d := e.eval(2*time.Second, load(e.current, 5000*x), false)
		if d.Panic {
			t.Fatalf("at %ds: panic on a forecast: %s", 2*k, d.Reason)
		}
		if f := d.Readings[0].Forecast; f > x*1.1+1e-9 {
			t.Fatalf("at %ds: forecast %.2f for a load of %.1f, want at most %.2f", 2*k, f, x, x*1.1)
		}
		if k == 45 && d.Readings[0].Forecast < x*1.1-1e-9 {
			t.Errorf("at the ramp's top: forecast %.2f, want the cap %.2f", d.Readings[0].Forecast, x*1.1)
		}
	}
}

func TestATrendFollowsAFallAtOnceWithAMeanBasis(t *testing.T) {
	t.Parallel()
	base := classic(1, 100)
	base.Tolerance, base.ScaleDownStabilization, base.ScaleDownBasis = 0.05, 120*time.Second, ScaleDownMean
	trend := base
	trend.TrendHorizon = 45 * time.Second
	seconds := map[bool]float64{}
	for _, on := range []bool{false, true} {
		p := base
		if on {
			p = trend
		}
		// A level of 20 replicas for 3 minutes, then a fall of one replica
		// a minute to 10.
		e := newEndpoint(p, 21)
		sawTrend := false
		for k := 0; k < 450; k++ {
			el := e.now.Sub(t0).Minutes()
			x := 20 - max(0, min(el-3, 10))
			before := e.current
			d := e.eval(2*time.Second, load(e.current, 5000*x), false)
			if float64(d.Desired) < x {
				t.Fatalf("trend %v at %.1f min: %d replicas for a load of %.2f: %s", on, el, d.Desired, x, d.Reason)
			}
			sawTrend = sawTrend || strings.Contains(d.Reason, "falling load")
			seconds[on] += 2 * float64(before)
		}
		if sawTrend != on {
			t.Errorf("trend %v: a reason named the falling load: %v", on, sawTrend)
		}
	}
	if seconds[true] >= 0.97*seconds[false] {
		t.Errorf("replica-seconds: trend %v, mean %v; want the trend at least 3 %% below", seconds[true], seconds[false])
	}
}

func TestATrendOnANoisyLevelChangesNothing(t *testing.T) {
	t.Parallel()
	p := classic(1, 100)
	p.TrendHorizon = 45 * time.Second
	e := newEndpoint(p, 10)
	// ±4 % around 9.5 replicas, alternating: the line stays flat.
	for k := 0; k < 600; k++ {
		x := 9.5 * (1 + 0.04*float64(1-2*(k%2)))
		if d := e.eval(2*time.Second, load(e.current, 5000*x), false); d.Changed {
			t.Fatalf("at %ds: %d → %d on noise: %s", 2*k, d.Current, d.Desired, d.Reason)
		}
	}
}
