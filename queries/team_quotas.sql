-- name: TeamQuotaListScoped :many
SELECT q.*, t.name AS team FROM team_quotas q JOIN teams t ON t.id = q.team_id
WHERE (@all_teams::boolean OR q.team_id = ANY(@team_ids::bigint[]))
ORDER BY t.name, q.resource;

-- name: TeamQuotaListAll :many
-- Every quota, for the fleet reconciler.
SELECT q.team_id, q.resource, q.amount, t.name AS team FROM team_quotas q JOIN teams t ON t.id = q.team_id
ORDER BY q.team_id, q.resource;

-- name: TeamQuotaGet :one
SELECT * FROM team_quotas WHERE team_id = @team_id AND resource = @resource;

-- name: TeamQuotaUpsert :one
INSERT INTO team_quotas (team_id, resource, amount, updated_by, updated_at)
VALUES (@team_id, @resource, @amount, @updated_by, @now)
ON CONFLICT (team_id, resource) DO UPDATE
SET amount = EXCLUDED.amount, updated_by = EXCLUDED.updated_by, updated_at = EXCLUDED.updated_at
RETURNING *;

-- name: TeamQuotaDelete :execrows
DELETE FROM team_quotas WHERE team_id = @team_id AND resource = @resource;
