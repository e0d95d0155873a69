-- name: SessionGet :one
SELECT * FROM sessions WHERE id_hash = @id_hash;

-- name: SessionTouch :exec
UPDATE sessions SET last_seen_at = @now WHERE id_hash = @id_hash;

-- name: SessionDelete :exec
DELETE FROM sessions WHERE id_hash = @id_hash;

-- name: SessionDeleteExpired :execrows
DELETE FROM sessions WHERE expires_at < @now OR last_seen_at < @idle_before;

-- SessionInsert is SessionCreate with the times taken from the caller's clock,
-- so idle and absolute timeouts follow one (injectable) clock.
-- name: SessionInsert :exec
INSERT INTO sessions (id_hash, user_id, csrf_token, created_at, last_seen_at, expires_at)
VALUES (@id_hash, @user_id, @csrf_token, @now, @now, @expires_at);
