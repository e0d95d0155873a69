package autoscaler

import (
	"context"
	"time"

	"modelplane/autoscale"
)

// HistoryFunc reads an endpoint's hourly request rates from from to to
// (traffic.Reader.HourlyRates, from ClickHouse's request statistics).
type HistoryFunc func(ctx context.Context, endpoint string, endpointID int64, from, to time.Time) (autoscale.History, error)

// historyRefresh is how often an endpoint's history is read again: its
// hours change once an hour, and the forecast's hour of the week with them.
const historyRefresh = time.Hour

// historyWeeks is how far back the history is read: the forecast averages
// the same weekday and hour over every week it covers.
const historyWeeks = 4

// history is one endpoint's hourly rates as last read.
type history struct {
	rates autoscale.History
	read  time.Time
	err   error
}

// forecast is the prediction an endpoint's policy asks for, or nil when
// its predictive mode is off. The horizon is the forecast's 15 minutes plus
// the endpoint's cold-start budget: a replica asked for now is ready within
// it when the budget holds (the measured cold starts are below it), so the
// forecast covers the load the replica will meet.
func (a *Loop) forecast(ctx context.Context, p *autoscale.Policy, endpoint string, endpointID int64, now time.Time) *autoscale.Prediction {
	if p.Predictive != autoscale.PredictiveAdvisory && p.Predictive != autoscale.PredictiveOn {
		return nil
	}
	if a.historyOf == nil {
		return &autoscale.Prediction{Why: "no history source"}
	}
	h := a.histories[endpointID]
	if h == nil || now.Sub(h.read) >= historyRefresh || now.Before(h.read) {
		rates, err := a.historyOf(ctx, endpoint, endpointID, now.Add(-historyWeeks*autoscale.Week), now)
		h = &history{rates: rates, read: now, err: err}
		a.histories[endpointID] = h
	}
	if h.err != nil {
		return &autoscale.Prediction{Why: "history: " + h.err.Error()}
	}
	rps, ok, why := autoscale.Forecast(h.rates, now, autoscale.DefaultHorizon+p.ColdStartBudget)
	return &autoscale.Prediction{RPS: rps, OK: ok, Why: why}
}
