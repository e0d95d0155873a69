package notify

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"modelplane/busapi"
	"modelplane/db"
)

// Type is an event's type as webhooks subscribe to it: "<kind>.<type>",
// such as rollout.state, rollout.verdict, rollout.approval, drift.alert,
// drift.resolved or budget.alert.
func Type(ev busapi.Event) string { return ev.Kind + "." + ev.Type }

// Types are the event types a webhook may subscribe to, besides "*".
var Types = []string{"rollout.state", "rollout.verdict", "rollout.approval", "drift.alert", "drift.resolved", "budget.alert"}

// Enqueue writes the deliveries of team's event ev, in the transaction q
// belongs to: one per webhook of the team subscribed to its type, and one
// to Alertmanager when the event is an alert (alertOf).
func Enqueue(ctx context.Context, q *db.Queries, team string, ev busapi.Event) error {
	payload, err := json.Marshal(ev)
	if err != nil {
		return fmt.Errorf("deliveries: %w", err)
	}
	typ := Type(ev)
	if err := q.DeliveryEnqueueWebhooks(ctx, db.DeliveryEnqueueWebhooksParams{EventType: typ, Event: payload, At: ev.At, Team: team}); err != nil {
		return fmt.Errorf("webhook deliveries: %w", err)
	}
	if _, ok := alertOf(team, ev); ok {
		if err := q.DeliveryEnqueueAlert(ctx, db.DeliveryEnqueueAlertParams{EventType: typ, Event: payload, At: ev.At, Team: team}); err != nil {
			return fmt.Errorf("alert delivery: %w", err)
		}
	}
	return nil
}

// resolveAfter is how long a one-shot alert (a rollback, a budget passed)
// stays firing in Alertmanager: long enough to be routed and seen, then
// it resolves by itself, since nothing will report it over.
const resolveAfter = time.Hour

// amAlert is one alert of Alertmanager's v2 API (POST /api/v2/alerts).
type amAlert struct {
	Labels       map[string]string `json:"labels"`
	Annotations  map[string]string `json:"annotations"`
	StartsAt     time.Time         `json:"startsAt"`
	EndsAt       time.Time         `json:"endsAt"`
	GeneratorURL string            `json:"generatorURL,omitempty"`
}

// alertOf returns the Alertmanager alert of an event, and whether the event
// is one: a rollback, a rollout awaiting approval, drift past a threshold
// (and its resolution, which ends the alert), a budget threshold passed.
// The alert names match the Prometheus rules' (deploy/prometheus), so a
// team routes both alike.
func alertOf(team string, ev busapi.Event) (amAlert, bool) {
	var name, severity, object = "", "warning", "endpoint"
	ends := ev.At.Add(resolveAfter)
	switch {
	case ev.Kind == "rollout" && ev.Type == "state" && ev.State == "rolled_back":
		name = "RolloutRolledBack"
	case ev.Kind == "rollout" && ev.Type == "state" && ev.State == "awaiting_approval":
		name, severity = "RolloutAwaitingApproval", "info"
	case ev.Kind == "drift" && ev.Type == "alert":
		name = "PredictionDrift"
	case ev.Kind == "drift" && ev.Type == "resolved":
		name, ends = "PredictionDrift", ev.At
	case ev.Kind == "budget" && ev.Type == "alert" && ev.State == "100":
		name, severity, object = "BudgetExhausted", "critical", "budget"
	case ev.Kind == "budget" && ev.Type == "alert":
		name, object = "BudgetAt80Percent", "budget"
	default:
		return amAlert{}, false
	}
	return amAlert{
		Labels:      map[string]string{"alertname": name, "severity": severity, "team": team, object: ev.Name, "source": "modelplane"},
		Annotations: map[string]string{"summary": ev.Message},
		StartsAt:    ev.At, EndsAt: ends,
	}, true
}
