-- name: ReplicaObserveMetrics :exec
-- Records the load and cold start a heartbeat reports for the node's
-- replicas; @metrics is a JSON object from replica name to its
-- fleet.ReplicaMetrics. rps is the growth of the requests counter since the
-- stored heartbeat over the time between them (observed_at_ms); a report
-- older than the stored one is not written, one of the same time keeps the
-- stored rate.
UPDATE replicas r SET metrics = u.metrics || jsonb_build_object('rps', CASE
    WHEN (u.metrics->>'observed_at_ms')::bigint = (r.metrics->>'observed_at_ms')::bigint
        THEN coalesce((r.metrics->>'rps')::double precision, 0)
    WHEN (u.metrics->>'observed_at_ms')::bigint > (r.metrics->>'observed_at_ms')::bigint
         AND (u.metrics->>'requests')::bigint >= (r.metrics->>'requests')::bigint
        THEN ((u.metrics->>'requests')::bigint - (r.metrics->>'requests')::bigint) * 1000.0
             / ((u.metrics->>'observed_at_ms')::bigint - (r.metrics->>'observed_at_ms')::bigint)
    ELSE 0 END)
FROM jsonb_each(@metrics::jsonb) AS u(name, metrics)
WHERE r.name = u.name AND r.node_id = @node_id
  AND coalesce((r.metrics->>'observed_at_ms')::bigint, 0) <= (u.metrics->>'observed_at_ms')::bigint;

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
