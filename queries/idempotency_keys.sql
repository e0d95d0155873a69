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
-- At most @batch_size of the records created before @before: the sweep
-- repeats it, so that no one statement holds locks on, or writes WAL for,
-- a whole day's records at once. Rows another sweep holds are skipped.
DELETE FROM idempotency_keys
WHERE (principal, key) IN (SELECT i.principal, i.key FROM idempotency_keys i WHERE i.created_at < @before
                           ORDER BY i.created_at LIMIT @batch_size::int FOR UPDATE SKIP LOCKED);
