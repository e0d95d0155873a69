-- name: APIKeyCreate :one
INSERT INTO api_keys (team_id, name, prefix, hash, role, created_by, expires_at)
VALUES (sqlc.narg(team_id), @name, @prefix, @hash, @role, sqlc.narg(created_by), sqlc.narg(expires_at))
RETURNING *;

-- name: APIKeyGetByPrefix :one
SELECT k.*, t.name AS team_name
FROM api_keys k LEFT JOIN teams t ON t.id = k.team_id
WHERE k.prefix = @prefix;

-- name: APIKeyTouch :exec
UPDATE api_keys SET last_used_at = @now
WHERE id = @id AND (last_used_at IS NULL OR last_used_at < @stale_before);

-- name: APIKeyListByTeam :many
SELECT k.*, t.name AS team_name
FROM api_keys k LEFT JOIN teams t ON t.id = k.team_id
WHERE (@all_teams::boolean OR k.team_id = ANY(@team_ids::bigint[])) AND k.id > @after_id
ORDER BY k.id LIMIT @lim;

-- name: APIKeyGet :one
SELECT k.*, t.name AS team_name
FROM api_keys k LEFT JOIN teams t ON t.id = k.team_id
WHERE k.id = @id AND (@all_teams::boolean OR k.team_id = ANY(@team_ids::bigint[]));

-- name: APIKeyRevoke :one
UPDATE api_keys SET revoked_at = now()
WHERE id = @id AND revoked_at IS NULL AND (@all_teams::boolean OR team_id = ANY(@team_ids::bigint[]))
RETURNING *;

-- name: APIKeyListActive :many
SELECT k.*, t.name AS team_name
FROM api_keys k LEFT JOIN teams t ON t.id = k.team_id
WHERE k.revoked_at IS NULL AND (k.expires_at IS NULL OR k.expires_at > @now::timestamptz)
ORDER BY k.id;
