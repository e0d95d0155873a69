-- name: PreemptionUpsert :exec
INSERT INTO endpoint_preemptions (endpoint_id, by_endpoint, by_tier, replicas, at)
VALUES (@endpoint_id, @by_endpoint, @by_tier, @replicas, @at)
ON CONFLICT (endpoint_id) DO UPDATE
SET by_endpoint = EXCLUDED.by_endpoint, by_tier = EXCLUDED.by_tier,
    replicas = EXCLUDED.replicas, at = EXCLUDED.at;

-- name: PreemptionListAll :many
SELECT * FROM endpoint_preemptions ORDER BY endpoint_id;

-- name: PreemptionDelete :exec
DELETE FROM endpoint_preemptions WHERE endpoint_id = ANY(@endpoint_ids::bigint[]);
