-- name: DeliveryEnqueueWebhooks :exec
-- One delivery of an event to each webhook of the team subscribed to its
-- type, in the transaction of the change the event tells of.
INSERT INTO deliveries (team_id, webhook_id, event_type, event, next_at, created_at, updated_at)
SELECT w.team_id, w.id, @event_type, @event, @at, @at, @at
FROM webhooks w
JOIN teams t ON t.id = w.team_id
WHERE t.name = @team AND (@event_type::text = ANY(w.event_types) OR '*' = ANY(w.event_types));

-- name: DeliveryEnqueueAlert :exec
-- One delivery of an alerting event to Alertmanager.
INSERT INTO deliveries (team_id, webhook_id, event_type, event, next_at, created_at, updated_at)
SELECT t.id, NULL, @event_type, @event, @at, @at, @at
FROM teams t
WHERE t.name = @team;

-- name: DeliveryClaimDue :many
-- Takes up to @lim pending deliveries that are due, counts the attempt and
-- moves their next try to @lease_until, so that a sender that dies mid-way
-- leaves them to be tried again then, and two senders never take the same.
UPDATE deliveries d SET attempts = d.attempts + 1, next_at = @lease_until, updated_at = @now
WHERE d.id IN (
    SELECT id FROM deliveries
    WHERE state = 'pending' AND next_at <= @now
    ORDER BY next_at, id
    LIMIT @lim
    FOR UPDATE SKIP LOCKED)
RETURNING d.id, d.webhook_id, d.event_type, d.event, d.attempts, (SELECT t.name FROM teams t WHERE t.id = d.team_id)::text AS team;

-- name: DeliveryRecord :exec
UPDATE deliveries SET state = @state, next_at = @next_at, last_status = @last_status, last_error = @last_error, updated_at = @now
WHERE id = @id;

-- name: DeliveryListScoped :many
-- A webhook's deliveries (or, @webhook_id 0, the team's Alertmanager
-- ones), newest first.
SELECT d.id, d.webhook_id, d.event_type, d.event, d.state, d.attempts, d.next_at, d.last_status, d.last_error, d.created_at, d.updated_at
FROM deliveries d
WHERE coalesce(d.webhook_id, 0) = @webhook_id::bigint AND (@all_teams::boolean OR d.team_id = ANY(@team_ids::bigint[]))
ORDER BY d.id DESC
LIMIT @lim;

-- name: DeliveryRedeliverScoped :execrows
-- Sends a finished delivery again from its first try.
UPDATE deliveries d SET state = 'pending', attempts = 0, next_at = @now, last_error = '', updated_at = @now
WHERE d.id = @id AND d.webhook_id = @webhook_id AND d.state IN ('dead', 'delivered')
  AND (@all_teams::boolean OR d.team_id = ANY(@team_ids::bigint[]));
