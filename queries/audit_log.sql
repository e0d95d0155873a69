-- name: AuditInsert :exec
INSERT INTO audit_log (team_id, actor, actor_user_id, actor_key_id, via, action, object_type, object_name, before, after)
VALUES (sqlc.narg(team_id), @actor, sqlc.narg(actor_user_id), sqlc.narg(actor_key_id), @via, @action, @object_type, @object_name, @before, @after);

-- name: AuditList :many
SELECT a.*, coalesce(t.name, '') AS team_name, coalesce(u.email, '') AS actor_email
FROM audit_log a LEFT JOIN teams t ON t.id = a.team_id LEFT JOIN users u ON u.id = a.actor_user_id
WHERE (@all_teams::boolean OR a.team_id = ANY(@team_ids::bigint[]))
  AND (@action::text = '' OR a.action = @action)
  AND (@object_type::text = '' OR a.object_type = @object_type)
  AND (@actor::text = '' OR a.actor = @actor)
  AND (@before_id::bigint = 0 OR a.id < @before_id)
ORDER BY a.id DESC LIMIT @lim;
