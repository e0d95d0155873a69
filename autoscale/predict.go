package autoscale

import (
	"fmt"
	"math"
	"time"
)

// Predictive pre-scaling (seed 001 section 7): the request rate of the next
// minutes is forecast from the same weekday and hour of the past weeks, and
// the count is raised to what that rate needs before it arrives.

// Week is how far back the same weekday and hour lie.
const Week = 7 * 24 * time.Hour

// MinHistory is the history a forecast needs: one full week.
const MinHistory = Week

// DefaultHorizon is how far ahead the forecast looks, before the measured
// cold start is added.
const DefaultHorizon = 15 * time.Minute

// HourRate is an endpoint's mean request rate over one hour.
type HourRate struct {
	// Hour is the hour's start (truncated to the hour, UTC).
	Hour time.Time
	// RPS is the requests of that hour divided by 3,600.
	RPS float64
}

// History is an endpoint's hourly request rates, oldest first; an hour with
// no requests may be absent (it counts as 0 once the history covers it).
// The control plane reads it from ClickHouse; the virtual-time fleet
// synthesises it.
type History []HourRate

// Forecast predicts the endpoint's request rate over [at, at+horizon]: for
// each hour that span touches, the mean of the same weekday and hour over
// every past week the history covers, and of those the highest (capacity
// must be there for the busiest part of the span). It needs at least
// MinHistory of history before at; without it, or without a horizon, ok is
// false and why says so.
func Forecast(h History, at time.Time, horizon time.Duration) (rps float64, ok bool, why string) {
	if horizon <= 0 {
		return 0, false, fmt.Sprintf("horizon %s is not positive", horizon)
	}
	if len(h) == 0 {
		return 0, false, "no request history"
	}
	first := h[0].Hour
	for _, p := range h {
		if p.Hour.Before(first) {
			first = p.Hour
		}
	}
	if have := at.Sub(first); have < MinHistory {
		return 0, false, fmt.Sprintf("history covers %s, a forecast needs %s", max(have, 0).Round(time.Minute), MinHistory)
	}
	byHour := make(map[int64]float64, len(h))
	for _, p := range h {
		byHour[p.Hour.UTC().Truncate(time.Hour).Unix()] += p.RPS
	}
	best := math.Inf(-1)
	start := at.UTC().Truncate(time.Hour)
	for hr := start; hr.Before(at.Add(horizon)); hr = hr.Add(time.Hour) {
		sum, n := 0.0, 0
		for past := hr.Add(-Week); !past.Before(first.UTC().Truncate(time.Hour)); past = past.Add(-Week) {
			sum += byHour[past.Unix()] // an hour the history covers without a row had no requests
			n++
		}
		if n > 0 {
			best = max(best, sum/float64(n))
		}
	}
	if math.IsInf(best, -1) {
		return 0, false, "no past week covers the forecast's hours"
	}
	return best, true, ""
}

// Prediction is a forecast handed to Decide: the endpoint's total request
// rate expected over the horizon plus the cold start. OK false carries why
// there is none.
type Prediction struct {
	RPS float64 `json:"rps"`
	OK  bool    `json:"ok"`
	Why string  `json:"why,omitempty"`
}

// predicted is the replica count a forecast asks for: the forecast over the
// rps target when the policy has one, else the recommendation scaled by the
// forecast over the requests/s the ready replicas report now. 0 with why
// when it cannot be had.
func predicted(p *Policy, f *Prediction, ready []Sample, rec int) (int, string) {
	if !f.OK {
		return 0, "no forecast: " + f.Why
	}
	for _, t := range p.Signals {
		if t.Signal == RPS {
			return ceil(f.RPS / t.Target), ""
		}
	}
	seen, n := 0.0, 0
	for _, m := range ready {
		if v, ok := m.Value(RPS); ok {
			seen += v
			n++
		}
	}
	if n == 0 || seen <= 0 {
		return 0, "no forecast in replicas: no ready replica reports rps"
	}
	seen *= float64(len(ready)) / float64(n)
	return ceil(float64(rec) * f.RPS / seen), ""
}
