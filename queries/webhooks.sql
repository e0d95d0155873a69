-- name: WebhookCreate :one
INSERT INTO webhooks (team_id, url, event_types, secret, key_id, created_by)
VALUES (@team_id, @url, @event_types, @secret, @key_id, @created_by)
RETURNING id, created_at;

-- name: WebhookListScoped :many
SELECT w.id, t.name AS team, w.url, w.event_types, w.created_by, w.created_at
FROM webhooks w
JOIN teams t ON t.id = w.team_id
WHERE (@all_teams::boolean OR w.team_id = ANY(@team_ids::bigint[]))
ORDER BY w.id;

-- name: WebhookGetScoped :one
SELECT w.id, w.team_id, t.name AS team, w.url, w.event_types, w.created_by, w.created_at
FROM webhooks w
JOIN teams t ON t.id = w.team_id
WHERE w.id = @id AND (@all_teams::boolean OR w.team_id = ANY(@team_ids::bigint[]));

-- name: WebhookDeleteScoped :execrows
DELETE FROM webhooks w
WHERE w.id = @id AND (@all_teams::boolean OR w.team_id = ANY(@team_ids::bigint[]));

-- name: WebhookSetSecret :exec
UPDATE webhooks SET secret = @secret, key_id = @key_id WHERE id = @id;

-- name: WebhookSecret :one
-- The sealed secret and address a delivery is sent with.
SELECT url, secret, key_id FROM webhooks WHERE id = @id;

-- name: WebhookListSealedWithOther :many
-- The webhooks whose secret is sealed with another key than @key_id, for
-- re-sealing after the server key rotated.
SELECT id, secret, key_id FROM webhooks WHERE key_id <> @key_id ORDER BY id;
