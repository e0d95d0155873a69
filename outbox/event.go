package outbox

import (
	"context"
	"encoding/json"
	"fmt"

	"modelplane/busapi"
	"modelplane/db"
	"modelplane/notify"
)

// Event writes ev for team's mp.events.<team> as an outbox row, and its
// deliveries to the team's webhooks and Alertmanager (package notify), in
// the transaction q belongs to, so that the event goes out exactly when the
// change it tells of commits.
func Event(ctx context.Context, q *db.Queries, team string, ev busapi.Event) error {
	payload, err := json.Marshal(ev)
	if err != nil {
		return fmt.Errorf("%s event: %w", ev.Kind, err)
	}
	if _, err := q.OutboxInsert(ctx, db.OutboxInsertParams{Subject: busapi.EventsSubject(team), Payload: payload}); err != nil {
		return fmt.Errorf("%s event: %w", ev.Kind, err)
	}
	return notify.Enqueue(ctx, q, team, ev)
}
