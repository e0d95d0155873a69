-- name: TeamCreate :one
INSERT INTO teams (name, display_name) VALUES (@name, @display_name) RETURNING *;

-- name: TeamGetByName :one
SELECT * FROM teams WHERE name = @name;

-- name: TeamList :many
SELECT * FROM teams WHERE id > @after_id ORDER BY id LIMIT @lim;

-- name: TeamListByIDs :many
SELECT * FROM teams WHERE id = ANY(@ids::bigint[]) ORDER BY name;
