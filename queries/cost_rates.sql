-- name: CostRateListAll :many
SELECT * FROM cost_rates ORDER BY gpu_type, profile, effective_from;
