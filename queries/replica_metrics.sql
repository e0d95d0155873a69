-- name: ReplicaObserveMetrics :exec
-- Records the load and cold start a heartbeat reports for the node's
-- replicas; @metrics is a JSON object from replica name to its
-- replica.Metrics. rps is the growth of the requests counter since the
-- stored heartbeat over the time between them (observed_at_ms); a report
-- older than the stored one is not written, one of the same time keeps the
-- stored rate. After a heartbeat whose runtime did not report the counter
-- (absent lists "requests") no rate is made of it: rps is absent too.
UPDATE replicas r SET metrics = u.metrics || jsonb_build_object('rps', CASE
    WHEN (u.metrics->>'observed_at_ms')::bigint = (r.metrics->>'observed_at_ms')::bigint
        THEN coalesce((r.metrics->>'rps')::double precision, 0)
    WHEN (u.metrics->>'observed_at_ms')::bigint > (r.metrics->>'observed_at_ms')::bigint
         AND (u.metrics->>'requests')::bigint >= (r.metrics->>'requests')::bigint
         AND NOT coalesce(r.metrics->'absent' @> '["requests"]'::jsonb, false)
        THEN ((u.metrics->>'requests')::bigint - (r.metrics->>'requests')::bigint) * 1000.0
             / ((u.metrics->>'observed_at_ms')::bigint - (r.metrics->>'observed_at_ms')::bigint)
    ELSE 0 END)
    || CASE WHEN coalesce(r.metrics->'absent' @> '["requests"]'::jsonb, false)
                 AND (u.metrics->>'observed_at_ms')::bigint > (r.metrics->>'observed_at_ms')::bigint
                 AND NOT coalesce(u.metrics->'absent' @> '["rps"]'::jsonb, false)
            THEN jsonb_build_object('absent', coalesce(u.metrics->'absent', '[]'::jsonb) || '["rps"]'::jsonb)
            ELSE '{}'::jsonb END
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

-- name: VersionRecordColdStarts :many
-- Appends to each version's version_cold_starts (keeping the latest five)
-- the cold start in @metrics (as ReplicaObserveMetrics takes it) of every
-- replica of the node that is ready, reports one, and has not had it
-- counted, marks those replicas counted, and returns the cold starts for
-- the metric. It runs after ReplicaObserve, so r.state is the heartbeat's:
-- a replica's cold start is counted once, from the first heartbeat that
-- shows it ready.
WITH fresh AS (
    SELECT r.id AS replica_id, r.version_id, e.name AS endpoint, v.name AS version,
           (COALESCE((u.metrics->'cold_start'->>'download_ms')::bigint, 0) + COALESCE((u.metrics->'cold_start'->>'verify_ms')::bigint, 0)
            + COALESCE((u.metrics->'cold_start'->>'load_ms')::bigint, 0) + COALESCE((u.metrics->'cold_start'->>'warmup_ms')::bigint, 0))::bigint AS total_ms
    FROM jsonb_each(@metrics::jsonb) AS u(name, metrics)
    JOIN replicas r ON r.name = u.name AND r.node_id = @node_id
    JOIN endpoints e ON e.id = r.endpoint_id
    JOIN model_versions v ON v.id = r.version_id
    WHERE r.state = 'ready' AND NOT r.cold_start_recorded
), measured AS (
    SELECT version_id, array_agg(total_ms ORDER BY total_ms) AS ms FROM fresh WHERE total_ms > 0 GROUP BY version_id
), kept AS (
    INSERT INTO version_cold_starts AS c (version_id, cold_starts_ms)
    SELECT version_id, ms[greatest(1, cardinality(ms) - 4):] FROM measured
    ON CONFLICT (version_id) DO UPDATE
    SET cold_starts_ms = (c.cold_starts_ms || EXCLUDED.cold_starts_ms)[greatest(1, cardinality(c.cold_starts_ms) + cardinality(EXCLUDED.cold_starts_ms) - 4):]
    RETURNING c.version_id
), counted AS (
    UPDATE replicas r SET cold_start_recorded = true FROM fresh f WHERE r.id = f.replica_id AND f.total_ms > 0
    RETURNING r.id
)
SELECT f.endpoint, f.version, f.total_ms FROM fresh f WHERE f.total_ms > 0;
