-- name: GrantUpsert :one
-- Grants, or changes, a team's call access to an endpoint.
INSERT INTO endpoint_grants (endpoint_id, team_id, rate_limit_rps, rate_limit_burst, daily_quota, sampling, granted_by)
VALUES (@endpoint_id, @team_id, @rate_limit_rps, @rate_limit_burst, @daily_quota, @sampling, @granted_by)
ON CONFLICT (endpoint_id, team_id) DO UPDATE SET rate_limit_rps = EXCLUDED.rate_limit_rps,
    rate_limit_burst = EXCLUDED.rate_limit_burst, daily_quota = EXCLUDED.daily_quota, sampling = EXCLUDED.sampling,
    granted_by = EXCLUDED.granted_by, updated_at = now()
RETURNING *;

-- name: GrantDelete :execrows
-- Revokes a grant of an endpoint the caller's teams own.
DELETE FROM endpoint_grants g USING endpoints e
WHERE g.endpoint_id = @endpoint_id AND g.team_id = @team_id AND e.id = g.endpoint_id
  AND (@all_teams::boolean OR e.team_id = ANY(@team_ids::bigint[]));

-- name: GrantListByEndpoint :many
-- The grants of an endpoint the caller's teams own, by consumer team name.
SELECT g.*, t.name AS team
FROM endpoint_grants g JOIN endpoints e ON e.id = g.endpoint_id JOIN teams t ON t.id = g.team_id
WHERE g.endpoint_id = @endpoint_id AND (@all_teams::boolean OR e.team_id = ANY(@team_ids::bigint[]))
ORDER BY t.name;

-- name: GrantListShared :many
-- What other teams shared with the caller's teams: each grant to one of
-- them with its endpoint, the owning team and the model's schemas.
SELECT g.*, c.name AS team, e.name AS endpoint, o.name AS owner, m.name AS model, m.task,
       m.input_schema, m.output_schema, m.feature_names
FROM endpoint_grants g
JOIN endpoints e ON e.id = g.endpoint_id
JOIN teams o ON o.id = e.team_id
JOIN teams c ON c.id = g.team_id
JOIN models m ON m.id = e.model_id
WHERE g.team_id = ANY(@team_ids::bigint[])
ORDER BY e.name, c.name;

-- name: GrantListForRoutes :many
-- Every grant with its consumer team's name, for the routing entries
-- (package route).
SELECT g.endpoint_id, t.name AS team, g.rate_limit_rps, g.rate_limit_burst, g.daily_quota, g.sampling
FROM endpoint_grants g JOIN teams t ON t.id = g.team_id
ORDER BY g.endpoint_id, t.name;

-- name: GrantListForRoute :many
-- GrantListForRoutes for one endpoint, with the same columns.
SELECT g.endpoint_id, t.name AS team, g.rate_limit_rps, g.rate_limit_burst, g.daily_quota, g.sampling
FROM endpoint_grants g JOIN teams t ON t.id = g.team_id
WHERE g.endpoint_id = @endpoint_id
ORDER BY t.name;
