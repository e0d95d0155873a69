-- name: SessionCreate :exec
INSERT INTO sessions (id_hash, user_id, csrf_token, expires_at)
VALUES (@id_hash, @user_id, @csrf_token, @expires_at);

-- name: SessionGet :one
SELECT * FROM sessions WHERE id_hash = @id_hash;

-- name: SessionTouch :exec
UPDATE sessions SET last_seen_at = @now WHERE id_hash = @id_hash;

-- name: SessionDelete :exec
DELETE FROM sessions WHERE id_hash = @id_hash;

-- name: SessionDeleteExpired :execrows
DELETE FROM sessions WHERE expires_at < @now OR last_seen_at < @idle_before;
