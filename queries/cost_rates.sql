-- name: CostRateListAll :many
SELECT * FROM cost_rates ORDER BY gpu_type, profile, effective_from;

-- name: CostRateCreate :one
INSERT INTO cost_rates (gpu_type, profile, uusd_per_hour, effective_from, created_by)
VALUES (@gpu_type, @profile, @uusd_per_hour, @effective_from, @created_by)
RETURNING *;
