-- name: CostRateListAll :many
SELECT * FROM cost_rates ORDER BY gpu_type, profile, effective_from;

-- name: CostRateCreate :one
INSERT INTO cost_rates (gpu_type, profile, uusd_per_hour, effective_from, created_by, created_by_user_id, created_by_key_id)
VALUES (@gpu_type, @profile, @uusd_per_hour, @effective_from, @created_by, sqlc.narg(created_by_user_id), sqlc.narg(created_by_key_id))
RETURNING *;

-- name: CostRateMaxID :one
-- The id of the newest rate row (0 with none): a report's rates version.
SELECT coalesce(max(id), 0)::bigint AS max_id FROM cost_rates;
