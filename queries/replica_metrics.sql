-- name: ReplicaObserveMetrics :exec
-- Records the load and cold start a heartbeat reports for the node's
-- replicas; @metrics is a JSON object from replica name to its
-- fleet.ReplicaMetrics. Rows whose metrics did not change are not written.
UPDATE replicas r SET metrics = u.metrics
FROM jsonb_each(@metrics::jsonb) AS u(name, metrics)
WHERE r.name = u.name AND r.node_id = @node_id AND r.metrics IS DISTINCT FROM u.metrics;

-- name: ReplicaListByNode :many
-- A node's replicas with what they serve and their last reported metrics,
-- for the fleet's node page (platform admins).
SELECT r.name, t.name AS team, e.name AS endpoint, v.name AS version, r.state, r.reason, r.failures, r.metrics
FROM replicas r
JOIN teams t ON t.id = r.team_id
JOIN endpoints e ON e.id = r.endpoint_id
JOIN model_versions v ON v.id = r.version_id
WHERE r.node_id = @node_id
ORDER BY r.name;
