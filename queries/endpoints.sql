-- name: EndpointCreate :one
INSERT INTO endpoints (team_id, name, model_id, runtime, instance_profile, min_replicas, max_replicas, tier,
    sampling_rate, retention_days, rate_limit_rps, rate_limit_burst, timeout_ms,
    batch_max_size, batch_max_queue_delay_us, batch_preferred_sizes, batch_queue_timeout_ms)
VALUES (@team_id, @name, @model_id, @runtime, @instance_profile, @min_replicas, @max_replicas, @tier,
    @sampling_rate, @retention_days, @rate_limit_rps, @rate_limit_burst, @timeout_ms,
    @batch_max_size, @batch_max_queue_delay_us, @batch_preferred_sizes::int[], @batch_queue_timeout_ms)
RETURNING *;

-- name: EndpointGet :one
SELECT e.*, t.name AS team_name, m.name AS model_name, m.task AS model_task,
       coalesce((SELECT json_agg(json_build_object('version', v.name, 'weight', r.weight, 'shadow_percent', r.shadow_percent) ORDER BY v.name)
                 FROM routing_rules r JOIN model_versions v ON v.id = r.version_id WHERE r.endpoint_id = e.id), '[]')::text AS traffic,
       coalesce((SELECT json_build_object('name', x.name, 'arms',
                        (SELECT json_agg(json_build_object('version', v.name, 'share', a.share) ORDER BY v.name)
                         FROM experiment_arms a JOIN model_versions v ON v.id = a.version_id WHERE a.endpoint_id = x.endpoint_id))
                 FROM experiments x WHERE x.endpoint_id = e.id), 'null')::text AS experiment
FROM endpoints e JOIN teams t ON t.id = e.team_id JOIN models m ON m.id = e.model_id
WHERE e.name = @name AND (@all_teams::boolean OR e.team_id = ANY(@team_ids::bigint[]));

-- name: EndpointList :many
SELECT e.*, t.name AS team_name, m.name AS model_name, m.task AS model_task,
       coalesce((SELECT json_agg(json_build_object('version', v.name, 'weight', r.weight, 'shadow_percent', r.shadow_percent) ORDER BY v.name)
                 FROM routing_rules r JOIN model_versions v ON v.id = r.version_id WHERE r.endpoint_id = e.id), '[]')::text AS traffic,
       coalesce((SELECT json_build_object('name', x.name, 'arms',
                        (SELECT json_agg(json_build_object('version', v.name, 'share', a.share) ORDER BY v.name)
                         FROM experiment_arms a JOIN model_versions v ON v.id = a.version_id WHERE a.endpoint_id = x.endpoint_id))
                 FROM experiments x WHERE x.endpoint_id = e.id), 'null')::text AS experiment
FROM endpoints e JOIN teams t ON t.id = e.team_id JOIN models m ON m.id = e.model_id
WHERE (@all_teams::boolean OR e.team_id = ANY(@team_ids::bigint[])) AND e.id > @after_id
ORDER BY e.id LIMIT @lim;

-- name: EndpointUpdate :one
UPDATE endpoints SET instance_profile = @instance_profile, min_replicas = @min_replicas,
    max_replicas = @max_replicas, tier = @tier, sampling_rate = @sampling_rate,
    retention_days = @retention_days, rate_limit_rps = @rate_limit_rps, rate_limit_burst = @rate_limit_burst,
    timeout_ms = @timeout_ms, batch_max_size = @batch_max_size, batch_max_queue_delay_us = @batch_max_queue_delay_us,
    batch_preferred_sizes = @batch_preferred_sizes::int[], batch_queue_timeout_ms = @batch_queue_timeout_ms, updated_at = now()
WHERE id = @id AND (@all_teams::boolean OR team_id = ANY(@team_ids::bigint[]))
RETURNING *;

-- name: EndpointDelete :execrows
DELETE FROM endpoints WHERE id = @id AND (@all_teams::boolean OR team_id = ANY(@team_ids::bigint[]));

-- name: EndpointSetPlacement :exec
UPDATE endpoints e SET status = u.status, placement_error = u.placement_error
FROM (SELECT unnest(@ids::bigint[]) AS id, unnest(@statuses::text[]) AS status,
             unnest(@placement_errors::text[]) AS placement_error) u
WHERE e.id = u.id AND (e.status, e.placement_error) IS DISTINCT FROM (u.status, u.placement_error);

-- name: EndpointWake :one
-- A gateway asked for a replica of the endpoint (proto.WakeSubject); prev is
-- the wake before this one, so the caller can tell a sleeping endpoint from
-- one whose grace it only extends. No row: no such endpoint, or a later wake
-- is already stored.
UPDATE endpoints e SET woken_at = sqlc.arg(now)::timestamptz
FROM (SELECT o.id, o.woken_at FROM endpoints o WHERE o.name = @name FOR UPDATE) old
WHERE e.id = old.id AND (e.woken_at IS NULL OR e.woken_at < sqlc.arg(now)::timestamptz)
RETURNING old.woken_at AS prev;

-- name: EndpointLockForRoute :one
-- The routing lock of one endpoint (package route): its row, held until the
-- transaction ends. Endpoint updates take the same row lock, so they
-- serialise with routing-entry writes too.
SELECT name FROM endpoints WHERE id = @id FOR NO KEY UPDATE;

-- name: EndpointLockForRoutes :exec
-- The routing lock of every endpoint, in id order, for the reconciler's pass.
SELECT id FROM endpoints ORDER BY id FOR NO KEY UPDATE;

-- name: EndpointAutoscaleSet :exec
-- Sets an endpoint's autoscaling policy: the bounds in their columns, the
-- rest as JSON.
UPDATE endpoints SET autoscale_policy = @policy, min_replicas = @min_replicas, max_replicas = @max_replicas, updated_at = now()
WHERE id = @id AND (@all_teams::boolean OR team_id = ANY(@team_ids::bigint[]));

-- name: EndpointAutoscalePolicy :one
-- The endpoint's own autoscaling policy (NULL: its task's defaults).
SELECT autoscale_policy FROM endpoints WHERE id = @id;

-- name: EndpointNames :many
-- The names of the endpoints that exist, with their team's: chargeback marks
-- the usage rows of endpoints deleted since.
SELECT t.name AS team_name, e.name
FROM endpoints e JOIN teams t ON t.id = e.team_id
WHERE (@all_teams::boolean OR e.team_id = ANY(@team_ids::bigint[]))
ORDER BY t.name, e.name;

-- name: EndpointGetAsTarget :one
-- What graph validation needs of an endpoint a graph node calls, whoever
-- owns it: endpoint.MayCall decides whether the graph's team may call it,
-- and a refusal reads like a missing endpoint. graphs are the definitions
-- of its routed graph versions, for finding cycles across graphs.
SELECT e.id, e.team_id, e.name, m.task, m.input_schema, m.output_schema,
       coalesce((SELECT jsonb_agg(v.graph) FROM routing_rules r JOIN model_versions v ON v.id = r.version_id
                 WHERE r.endpoint_id = e.id AND v.graph IS NOT NULL), '[]')::jsonb AS graphs
FROM endpoints e
JOIN models m ON m.id = e.model_id
WHERE e.name = @name;

-- name: EndpointGraphsCalling :many
-- The graph endpoints of team whose routed versions call the endpoint of
-- id endpoint_id: what a revocation of team's access to it breaks.
SELECT DISTINCT e.name
FROM endpoints e
JOIN teams t ON t.id = e.team_id
JOIN routing_rules r ON r.endpoint_id = e.id
JOIN model_versions v ON v.id = r.version_id
WHERE t.name = @team AND v.graph IS NOT NULL
  AND jsonb_path_exists(v.graph, '$.nodes[*] ? (@.endpoint == $name)',
                        jsonb_build_object('name', (SELECT x.name FROM endpoints x WHERE x.id = @endpoint_id::bigint)))
ORDER BY e.name;

-- name: EndpointBackdate :execrows
UPDATE endpoints SET created_at = @created_at WHERE id = @id AND created_at > @created_at;
