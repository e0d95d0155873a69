-- name: IdempotencyGet :one
SELECT * FROM idempotency_keys WHERE principal = @principal AND key = @key;

-- name: IdempotencyBegin :execrows
INSERT INTO idempotency_keys (principal, key, request_hash, status, content_type, body)
VALUES (@principal, @key, '', 0, '', '')
ON CONFLICT (principal, key) DO NOTHING;

-- name: IdempotencyFinish :exec
UPDATE idempotency_keys SET request_hash = @request_hash, status = @status, content_type = @content_type, location = @location, body = @body
WHERE principal = @principal AND key = @key;

-- name: IdempotencyAbort :exec
DELETE FROM idempotency_keys WHERE principal = @principal AND key = @key AND status = 0;

-- name: IdempotencyDeleteOld :execrows
DELETE FROM idempotency_keys WHERE created_at < @before;
