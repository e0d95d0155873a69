-- name: RouteEntryList :many
SELECT * FROM route_entries;

-- name: RouteEntryGet :one
SELECT * FROM route_entries WHERE endpoint = @endpoint;

-- name: RouteEntryUpsert :exec
INSERT INTO route_entries (endpoint, generation, hash) VALUES (@endpoint, @generation, @hash)
ON CONFLICT (endpoint) DO UPDATE SET generation = excluded.generation, hash = excluded.hash;

-- name: RouteEntryDelete :exec
DELETE FROM route_entries WHERE endpoint = @endpoint;
