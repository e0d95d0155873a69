package autoscale

import (
	"strings"
	"testing"
	"time"
)

// weeks is n weeks of hourly history ending at end (exclusive): each hour's
// rate is rate(hour of the week).
func weeks(end time.Time, n int, rate func(h time.Time) float64) History {
	var h History
	for t := end.Add(-time.Duration(n) * Week); t.Before(end); t = t.Add(time.Hour) {
		h = append(h, HourRate{Hour: t, RPS: rate(t)})
	}
	return h
}

func TestForecastIsTheSameWeekdayAndHourOfPastWeeks(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 2, 9, 50, 0, 0, time.UTC) // a Wednesday
	// Every day 100 req/s, 900 from 10:00 to 11:00 on Wednesdays only,
	// growing by 100 a week (mean of the weeks: 900 + 50 over two weeks).
	week := 0
	h := weeks(at.Truncate(time.Hour), 2, func(t time.Time) float64 {
		if t.Weekday() == time.Wednesday && t.Hour() == 10 {
			week++
			return 800 + 100*float64(week)
		}
		return 100
	})
	// 09:50 + 15 min reaches into 10:00: the busiest hour of the span wins.
	rps, ok, why := Forecast(h, at, 15*time.Minute)
	if !ok || rps != 950 {
		t.Fatalf("forecast %v ok %v (%s), want 950 (mean of 900 and 1000)", rps, ok, why)
	}
	// 09:00 to 09:40: only the quiet hour.
	if rps, ok, _ := Forecast(h, at.Add(-50*time.Minute), 40*time.Minute); !ok || rps != 100 {
		t.Errorf("forecast of the quiet hour %v ok %v, want 100", rps, ok)
	}
	// A Thursday 10:00 is quiet: the weekday matters.
	if rps, ok, _ := Forecast(h, at.Add(-6*24*time.Hour-50*time.Minute), 15*time.Minute); !ok || rps != 100 {
		t.Errorf("Thursday forecast %v ok %v, want 100", rps, ok)
	}
}

func TestForecastNeedsAWeekOfHistory(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC)
	flat := func(time.Time) float64 { return 50 }
	short := weeks(at, 1, flat)[1:] // one hour short of a week
	if _, ok, why := Forecast(short, at, 15*time.Minute); ok || !strings.Contains(why, "history covers 167h0m0s, a forecast needs 168h0m0s") {
		t.Errorf("6 days 23 hours: ok %v, why %q", ok, why)
	}
	if _, ok, why := Forecast(nil, at, 15*time.Minute); ok || why != "no request history" {
		t.Errorf("no history: ok %v, why %q", ok, why)
	}
	if rps, ok, why := Forecast(weeks(at, 1, flat), at, 15*time.Minute); !ok || rps != 50 {
		t.Errorf("exactly a week: %v ok %v (%s), want 50", rps, ok, why)
	}
	if _, ok, why := Forecast(weeks(at, 1, flat), at, 0); ok || !strings.Contains(why, "horizon") {
		t.Errorf("zero horizon: ok %v, why %q", ok, why)
	}
	// Hours without a row inside the covered span had no requests.
	sparse := History{{Hour: at.Add(-Week - time.Hour), RPS: 10}, {Hour: at.Add(-time.Hour), RPS: 10}}
	if rps, ok, _ := Forecast(sparse, at, 15*time.Minute); !ok || rps != 0 {
		t.Errorf("an hour without requests: %v ok %v, want 0", rps, ok)
	}
}

func TestPredictiveOnRaisesAndAdvisoryOnlyRecords(t *testing.T) {
	t.Parallel()
	in := func() Input {
		return Input{Now: t0, Current: 4, Ready: replicas(4, RPS, 2500, QueueDepth, 0),
			Forecast: &Prediction{RPS: 40000, OK: true}}
	}
	// rps 2500/5000 on 4 wants 2 (a state deciding for an hour with
	// nothing in the down window to hold it); the forecast of 40,000 req/s wants 8.
	p := classic(1, 100)
	p.Predictive = PredictiveAdvisory
	s := deciding(t0)
	d := s.Decide(&p, in())
	if d.Desired != 2 || d.Predicted != 8 || !strings.Contains(d.Reason, "predictive would have asked 8 (forecast 40000 req/s)") {
		t.Errorf("advisory: desired %d predicted %d: %s", d.Desired, d.Predicted, d.Reason)
	}
	p.Predictive = PredictiveOn
	s = deciding(t0)
	d = s.Decide(&p, in())
	if d.Desired != 8 || !d.Changed || !strings.Contains(d.Reason, "predictive: forecast 40000 req/s asks 8") {
		t.Errorf("on: desired %d: %s", d.Desired, d.Reason)
	}
	// On never lowers: a forecast below the load keeps what the load wants.
	s = deciding(t0)
	low := in()
	low.Ready = replicas(4, RPS, 10000, QueueDepth, 0)
	low.Forecast = &Prediction{RPS: 5000, OK: true}
	if d := s.Decide(&p, low); d.Desired != 8 || d.Predicted != 1 {
		t.Errorf("on, low forecast: desired %d predicted %d, want 8 and 1: %s", d.Desired, d.Predicted, d.Reason)
	}
	// max_replicas clamps the forecast too.
	s = deciding(t0)
	capped := classic(1, 6)
	capped.Predictive = PredictiveOn
	if d := s.Decide(&capped, in()); d.Desired != 6 {
		t.Errorf("on, max 6: desired %d: %s", d.Desired, d.Reason)
	}
	// No forecast: nothing changes and the reason says why.
	s = deciding(t0)
	none := in()
	none.Forecast = &Prediction{Why: "history covers 72h0m0s, a forecast needs 168h0m0s"}
	if d := s.Decide(&p, none); d.Desired != 2 || !strings.Contains(d.Reason, "predictive: no forecast: history covers 72h") {
		t.Errorf("on, no forecast: desired %d: %s", d.Desired, d.Reason)
	}
	// Off ignores a forecast.
	s = deciding(t0)
	off := classic(1, 100)
	if d := s.Decide(&off, in()); d.Desired != 2 || d.Predicted != 0 || strings.Contains(d.Reason, "predictive") {
		t.Errorf("off: desired %d predicted %d: %s", d.Desired, d.Predicted, d.Reason)
	}
}

func TestPredictiveWithoutAnRPSTargetScalesTheRecommendation(t *testing.T) {
	t.Parallel()
	// An LLM policy has no rps target: 4 replicas serving 40 req/s in all,
	// whose KV use wants 4; a forecast of 100 req/s wants 4 × 100/40 = 10.
	p := llm(1, 100)
	p.Predictive = PredictiveOn
	var s State
	ready := replicas(4, RPS, 10, InFlight, 20, KVCache, 0.85, QueueDepth, 0, TokensPerSecond, 900)
	d := s.Decide(&p, Input{Now: t0, Current: 4, Ready: ready, Forecast: &Prediction{RPS: 100, OK: true}})
	if d.Desired != 10 || d.Predicted != 10 {
		t.Errorf("desired %d predicted %d, want 10: %s", d.Desired, d.Predicted, d.Reason)
	}
	s = State{}
	noRPS := replicas(4, InFlight, 20, KVCache, 0.85, QueueDepth, 0, TokensPerSecond, 900)
	d = s.Decide(&p, Input{Now: t0, Current: 4, Ready: noRPS, Forecast: &Prediction{RPS: 100, OK: true}})
	if d.Desired != 4 || !strings.Contains(d.Reason, "no ready replica reports rps") {
		t.Errorf("without rps: desired %d: %s", d.Desired, d.Reason)
	}
}
