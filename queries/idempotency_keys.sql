-- name: IdempotencyGet :one
SELECT * FROM idempotency_keys WHERE principal = @principal AND key = @key;

-- name: IdempotencyPut :exec
INSERT INTO idempotency_keys (principal, key, request_hash, status, content_type, body)
VALUES (@principal, @key, @request_hash, @status, @content_type, @body)
ON CONFLICT (principal, key) DO NOTHING;

-- name: IdempotencyDeleteOld :execrows
DELETE FROM idempotency_keys WHERE created_at < @before;
