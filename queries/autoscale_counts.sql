-- name: AutoscaleEndpointList :many
-- Every routed endpoint as the autoscaler evaluates it: its policy and
-- bounds, whether any routed version runs on GPUs, its last wake, and the
-- count it was last set to (NULL: never decided, min_replicas).
SELECT e.id, e.team_id, t.name AS team, e.name, m.task, e.min_replicas, e.max_replicas, e.autoscale_policy, e.woken_at,
       EXISTS (SELECT 1 FROM routing_rules r JOIN model_versions v ON v.id = r.version_id
               WHERE r.endpoint_id = e.id AND v.gpu_count > 0)::boolean AS gpu,
       c.desired
FROM endpoints e
JOIN teams t ON t.id = e.team_id
JOIN models m ON m.id = e.model_id
LEFT JOIN autoscale_counts c ON c.endpoint_id = e.id
WHERE EXISTS (SELECT 1 FROM routing_rules r WHERE r.endpoint_id = e.id)
ORDER BY e.id;

-- name: AutoscaleReplicaList :many
-- The replicas of every routed version that serves callers (weight above
-- 0 or an experiment arm: shadows and parked versions carry no load of
-- the endpoint's own), with their state and the node's latest metrics.
SELECT r.name, r.endpoint_id, r.state, r.metrics
FROM replicas r
JOIN routing_rules rr ON rr.endpoint_id = r.endpoint_id AND rr.version_id = r.version_id
WHERE rr.weight > 0 OR EXISTS (SELECT 1 FROM experiment_arms a WHERE a.endpoint_id = r.endpoint_id AND a.version_id = r.version_id)
ORDER BY r.endpoint_id, r.id;

-- name: AutoscaleCountSet :exec
-- Records the autoscaler's count for an endpoint.
INSERT INTO autoscale_counts (endpoint_id, desired, decided_at) VALUES (@endpoint_id, @desired, @decided_at)
ON CONFLICT (endpoint_id) DO UPDATE SET desired = excluded.desired, decided_at = excluded.decided_at;

-- name: AutoscaleCountGet :one
-- The autoscaler's count of one endpoint and when it decided it.
SELECT desired, decided_at FROM autoscale_counts WHERE endpoint_id = @endpoint_id;

-- name: EndpointRoutesGPUVersion :one
-- Whether any version the endpoint routes runs on GPUs (it can report
-- gpu_util).
SELECT EXISTS (SELECT 1 FROM routing_rules r JOIN model_versions v ON v.id = r.version_id
               WHERE r.endpoint_id = @endpoint_id AND v.gpu_count > 0)::boolean;

-- name: EndpointReplicaTotal :one
-- The replica count of the whole endpoint the fleet aims for: the
-- autoscaler's count within [min_replicas, max_replicas], min_replicas
-- before its first decision (fleet's endpointTotal).
SELECT greatest(e.min_replicas, least(coalesce(c.desired, e.min_replicas), e.max_replicas))::int AS total
FROM endpoints e LEFT JOIN autoscale_counts c ON c.endpoint_id = e.id
WHERE e.id = @endpoint_id AND (@all_teams::boolean OR e.team_id = ANY(@team_ids::bigint[]));
