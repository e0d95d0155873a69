-- name: ExperimentUpsert :exec
INSERT INTO experiments (endpoint_id, name) VALUES (@endpoint_id, @name)
ON CONFLICT (endpoint_id) DO UPDATE SET name = excluded.name, updated_at = now();

-- name: ExperimentArmDeleteByEndpoint :exec
DELETE FROM experiment_arms a USING endpoints e
WHERE a.endpoint_id = @endpoint_id AND e.id = a.endpoint_id AND (@all_teams::boolean OR e.team_id = ANY(@team_ids::bigint[]));

-- name: ExperimentArmInsert :exec
INSERT INTO experiment_arms (endpoint_id, version_id, share) VALUES (@endpoint_id, @version_id, @share);

-- name: ExperimentDelete :execrows
DELETE FROM experiments x USING endpoints e
WHERE x.endpoint_id = @endpoint_id AND e.id = x.endpoint_id AND (@all_teams::boolean OR e.team_id = ANY(@team_ids::bigint[]));

-- name: ExperimentListForRoutes :many
SELECT x.endpoint_id, x.name, v.name AS version, a.share
FROM experiments x
JOIN experiment_arms a ON a.endpoint_id = x.endpoint_id
JOIN model_versions v ON v.id = a.version_id
ORDER BY x.endpoint_id, v.name;

-- name: ExperimentListForRoute :many
-- ExperimentListForRoutes for one endpoint, with the same columns.
SELECT x.endpoint_id, x.name, v.name AS version, a.share
FROM experiments x
JOIN experiment_arms a ON a.endpoint_id = x.endpoint_id
JOIN model_versions v ON v.id = a.version_id
WHERE x.endpoint_id = @endpoint_id
ORDER BY v.name;
