-- name: APIKeyCreate :one
INSERT INTO api_keys (team_id, name, prefix, hash, role, created_by, expires_at)
VALUES (sqlc.narg(team_id), @name, @prefix, @hash, @role, sqlc.narg(created_by), sqlc.narg(expires_at))
RETURNING *;

-- creator_holds is whether the key's creator could still mint it: a key
-- with no creator (made by the system or a seed) always; otherwise the
-- creator is a platform admin, or holds finance for a finance key, or is a
-- member of the key's team with a role at least the key's (viewer <
-- engineer < admin). It is the same expression in every query below that
-- returns it; tenant republishes a key to the gateways, or deletes its
-- entry, by it.

-- name: APIKeyGetByPrefix :one
SELECT k.*, t.name AS team_name,
       (k.created_by IS NULL
        OR EXISTS (SELECT 1 FROM users u WHERE u.id = k.created_by
                   AND (u.platform_role = 'platform_admin' OR (u.platform_role = 'finance' AND k.role = 'finance')))
        OR EXISTS (SELECT 1 FROM team_members m WHERE m.team_id = k.team_id AND m.user_id = k.created_by
                   AND array_position(ARRAY['viewer', 'engineer', 'admin'], m.role)
                       >= array_position(ARRAY['viewer', 'engineer', 'admin'], k.role)))::boolean AS creator_holds,
       COALESCE((SELECT u.email FROM users u WHERE u.id = k.created_by), '')::text AS creator_email
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
SELECT k.*, t.name AS team_name,
       (k.created_by IS NULL
        OR EXISTS (SELECT 1 FROM users u WHERE u.id = k.created_by
                   AND (u.platform_role = 'platform_admin' OR (u.platform_role = 'finance' AND k.role = 'finance')))
        OR EXISTS (SELECT 1 FROM team_members m WHERE m.team_id = k.team_id AND m.user_id = k.created_by
                   AND array_position(ARRAY['viewer', 'engineer', 'admin'], m.role)
                       >= array_position(ARRAY['viewer', 'engineer', 'admin'], k.role)))::boolean AS creator_holds
FROM api_keys k LEFT JOIN teams t ON t.id = k.team_id
WHERE k.revoked_at IS NULL AND (k.expires_at IS NULL OR k.expires_at > @now::timestamptz)
ORDER BY k.id;

-- APIKeyListActiveByCreator is APIKeyListActive for the keys one user made
-- for one team, read after that user's membership of the team changed.
-- name: APIKeyListActiveByCreator :many
SELECT k.*, t.name AS team_name,
       (k.created_by IS NULL
        OR EXISTS (SELECT 1 FROM users u WHERE u.id = k.created_by
                   AND (u.platform_role = 'platform_admin' OR (u.platform_role = 'finance' AND k.role = 'finance')))
        OR EXISTS (SELECT 1 FROM team_members m WHERE m.team_id = k.team_id AND m.user_id = k.created_by
                   AND array_position(ARRAY['viewer', 'engineer', 'admin'], m.role)
                       >= array_position(ARRAY['viewer', 'engineer', 'admin'], k.role)))::boolean AS creator_holds
FROM api_keys k JOIN teams t ON t.id = k.team_id
WHERE k.team_id = @team_id AND k.created_by = @created_by
  AND k.revoked_at IS NULL AND (k.expires_at IS NULL OR k.expires_at > @now::timestamptz)
ORDER BY k.id;
