-- name: OpsReplicaList :many
-- Every replica with what it serves, where, its state, its allocation and
-- the metrics its node's latest heartbeat reported.
SELECT r.name, t.name AS team, e.name AS endpoint, v.name AS version, n.name AS node,
       r.state, r.failures, r.gpu_type, r.profile, r.cpu_cores, r.metrics,
       (SELECT count(*) FROM allocations a WHERE a.replica_id = r.id)::integer AS slices
FROM replicas r
JOIN teams t ON t.id = r.team_id
JOIN endpoints e ON e.id = r.endpoint_id
JOIN model_versions v ON v.id = r.version_id
JOIN nodes n ON n.id = r.node_id
ORDER BY r.name;

-- name: OpsNodeList :many
-- Every node with its last heartbeat, its GPUs' reported use, and what of
-- its slices and cores replicas hold.
SELECT n.name, n.state, n.last_heartbeat, n.inventory, n.gpu_use, n.cpu_cores,
       (SELECT count(*) FROM gpu_slices s WHERE s.node_id = n.id)::integer AS slices,
       (SELECT count(*) FROM allocations a WHERE a.node_id = n.id)::integer AS slices_used,
       (SELECT coalesce(sum(r.cpu_cores), 0) FROM replicas r WHERE r.node_id = n.id)::integer AS cores_used
FROM nodes n
ORDER BY n.name;

-- name: OpsEndpointList :many
-- Every endpoint with its replica bounds and the count the autoscaler last
-- decided (-1 when it never decided one).
SELECT t.name AS team, e.name AS endpoint, e.min_replicas, e.max_replicas,
       coalesce(c.desired, -1)::integer AS desired
FROM endpoints e
JOIN teams t ON t.id = e.team_id
LEFT JOIN autoscale_counts c ON c.endpoint_id = e.id
ORDER BY e.name;

-- name: OpsRolloutCounts :many
-- Rollouts by endpoint and state: a finished state's count only grows (a
-- counter an alert can take the increase of), a running state's is a gauge.
SELECT e.name AS endpoint, ro.state, count(*)::bigint AS n
FROM rollouts ro
JOIN endpoints e ON e.id = ro.endpoint_id
GROUP BY e.name, ro.state
ORDER BY e.name, ro.state;

-- name: OpsVersionSLAList :many
-- The p99 latency target of every version an endpoint routes to, where the
-- version states one.
SELECT t.name AS team, e.name AS endpoint, v.name AS version, v.p99_latency_ms::double precision AS p99_latency_ms
FROM routing_rules rr
JOIN endpoints e ON e.id = rr.endpoint_id
JOIN teams t ON t.id = e.team_id
JOIN model_versions v ON v.id = rr.version_id
WHERE v.p99_latency_ms IS NOT NULL
ORDER BY e.name, v.name;
