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

-- name: SessionLookup :one
SELECT s.user_id, s.csrf_token, s.last_seen_at, s.expires_at, u.email, u.subject, u.platform_role,
       coalesce((SELECT json_agg(json_build_object('team_id', m.team_id, 'team', t.name, 'role', m.role) ORDER BY t.name)
                 FROM team_members m JOIN teams t ON t.id = m.team_id WHERE m.user_id = s.user_id), '[]')::text AS teams
FROM sessions s JOIN users u ON u.id = s.user_id
WHERE s.id_hash = @id_hash;
