-- name: OutboxInsert :one
INSERT INTO outbox (subject, payload) VALUES (@subject, @payload) RETURNING id;

-- name: OutboxPending :many
SELECT * FROM outbox WHERE published_at IS NULL ORDER BY id LIMIT @lim;

-- name: OutboxMarkPublished :exec
UPDATE outbox SET published_at = now() WHERE id = @id;

-- name: OutboxMarkPublishedMany :exec
UPDATE outbox SET published_at = now() WHERE id = ANY(@ids::bigint[]);

-- name: OutboxMarkRefused :exec
UPDATE outbox SET published_at = now(), error = @error WHERE id = @id;

-- name: OutboxDeletePublished :execrows
DELETE FROM outbox WHERE published_at < @before::timestamptz AND error IS NULL;
