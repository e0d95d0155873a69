-- name: ModelCreate :one
INSERT INTO models (team_id, name, task, description, input_schema, output_schema, feature_names, created_by,
    created_by_user_id, created_by_key_id)
VALUES (@team_id, @name, @task, @description, @input_schema, @output_schema, @feature_names, @created_by,
    sqlc.narg(created_by_user_id), sqlc.narg(created_by_key_id))
RETURNING *;

-- name: ModelGet :one
SELECT m.*, t.name AS team_name
FROM models m JOIN teams t ON t.id = m.team_id
WHERE m.name = @name AND (@all_teams::boolean OR m.team_id = ANY(@team_ids::bigint[]));

-- name: ModelList :many
SELECT m.*, t.name AS team_name,
       (SELECT count(*) FROM model_versions v WHERE v.model_id = m.id) AS version_count
FROM models m JOIN teams t ON t.id = m.team_id
WHERE (@all_teams::boolean OR m.team_id = ANY(@team_ids::bigint[])) AND m.id > @after_id
ORDER BY m.id LIMIT @lim;

-- name: ModelUpdateDescription :one
UPDATE models SET description = @description
WHERE id = @id AND (@all_teams::boolean OR team_id = ANY(@team_ids::bigint[]))
RETURNING *;
