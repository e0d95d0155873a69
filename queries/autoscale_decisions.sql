-- name: AutoscaleDecisionInsert :exec
INSERT INTO autoscale_decisions (team_id, endpoint_id, at, before, after, signal, reason, decision)
VALUES (@team_id, @endpoint_id, @at, @before, @after, @signal, @reason, @decision);

-- name: AutoscaleDecisionList :many
-- An endpoint's decisions, newest first, before @before_id (0: from the
-- newest), scoped to the caller's teams.
SELECT d.id, d.at, d.before, d.after, d.signal, d.reason, d.decision
FROM autoscale_decisions d
WHERE d.endpoint_id = @endpoint_id AND (@before_id::bigint = 0 OR d.id < @before_id)
  AND (@all_teams::boolean OR d.team_id = ANY(@team_ids::bigint[]))
ORDER BY d.id DESC
LIMIT @lim;
