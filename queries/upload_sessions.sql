-- name: UploadSessionCreate :exec
INSERT INTO upload_sessions (id, team_id, model_id, spec, manifest, created_by, created_at, expires_at)
VALUES (@id, @team_id, @model_id, @spec, @manifest, @created_by, @created_at, @expires_at);

-- name: UploadSessionGetScoped :one
-- A session the caller's teams own that has not expired at @now.
SELECT u.id, u.team_id, u.model_id, m.name AS model, u.spec, u.manifest, u.created_by, u.created_at, u.expires_at, u.version_id
FROM upload_sessions u
JOIN models m ON m.id = u.model_id
WHERE u.id = @id AND u.expires_at > @now AND (@all_teams::boolean OR u.team_id = ANY(@team_ids::bigint[]));

-- name: UploadSessionLockScoped :one
-- The same, locked for the completion that registers its version.
SELECT u.id, u.version_id
FROM upload_sessions u
WHERE u.id = @id AND u.expires_at > @now AND (@all_teams::boolean OR u.team_id = ANY(@team_ids::bigint[]))
FOR UPDATE;

-- name: UploadSessionComplete :exec
UPDATE upload_sessions SET version_id = @version_id WHERE id = @id;

-- name: UploadSessionsExpired :many
-- Sessions expired at @now, for the sweeper to remove with their chunks.
SELECT id FROM upload_sessions WHERE expires_at <= @now ORDER BY expires_at LIMIT @lim;

-- name: UploadSessionDelete :exec
DELETE FROM upload_sessions WHERE id = @id;

-- name: UploadChunkAdd :exec
INSERT INTO upload_chunks (session_id, team_id, digest, size)
VALUES (@session_id, @team_id, @digest, @size)
ON CONFLICT (session_id, digest) DO NOTHING;

-- name: UploadChunkListScoped :many
SELECT c.digest, c.size
FROM upload_chunks c
WHERE c.session_id = @session_id AND (@all_teams::boolean OR c.team_id = ANY(@team_ids::bigint[]))
ORDER BY c.digest;

-- name: UploadChunkBytesScoped :one
-- The bytes a session holds, held to the upload limit.
SELECT COALESCE(SUM(c.size), 0)::bigint AS total
FROM upload_chunks c
WHERE c.session_id = @session_id AND (@all_teams::boolean OR c.team_id = ANY(@team_ids::bigint[]));
