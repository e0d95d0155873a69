-- name: TeamCreate :one
INSERT INTO teams (name, display_name) VALUES (@name, @display_name) RETURNING *;

-- name: TeamGetByName :one
SELECT * FROM teams WHERE name = @name;

-- name: TeamListByIDs :many
SELECT * FROM teams WHERE id = ANY(@ids::bigint[]) ORDER BY name;

-- name: TeamGetScoped :one
SELECT * FROM teams WHERE name = @name AND (@all_teams::boolean OR id = ANY(@team_ids::bigint[]));

-- name: TeamListScoped :many
SELECT * FROM teams WHERE (@all_teams::boolean OR id = ANY(@team_ids::bigint[])) AND id > @after_id ORDER BY id LIMIT @lim;

-- name: TeamLock :exec
SELECT id FROM teams WHERE id = @id AND (@all_teams::boolean OR id = ANY(@team_ids::bigint[])) FOR UPDATE;

-- name: TeamIDByName :one
-- The id of a team named by another team's owners: the consumer of a grant
-- (package grant). It returns the id alone, no team data.
SELECT id FROM teams WHERE name = @name;
