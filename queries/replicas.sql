-- name: ReplicaListAll :many
SELECT r.id, r.name, r.endpoint_id, r.version_id, r.node_id, n.name AS node, r.state, r.addr, r.gpu_type, r.profile, r.cpu_cores, r.memory_mb, r.token,
       t.name AS team, e.name AS endpoint, m.name AS model, m.task, v.name AS version, v.sim_profile,
       v.runtime, v.format, v.artifact_uri, m.feature_names, v.serving,
       e.batch_max_size, e.batch_max_queue_delay_us, e.batch_preferred_sizes, e.batch_queue_timeout_ms,
       coalesce(s.gpus, '{}')::int[] AS slot_gpus, coalesce(s.slices, '{}')::int[] AS slot_slices
FROM replicas r
JOIN nodes n ON n.id = r.node_id
JOIN teams t ON t.id = r.team_id
JOIN endpoints e ON e.id = r.endpoint_id
JOIN models m ON m.id = e.model_id
JOIN model_versions v ON v.id = r.version_id
LEFT JOIN (SELECT replica_id, array_agg(gpu ORDER BY gpu, slice) AS gpus, array_agg(slice ORDER BY gpu, slice) AS slices
           FROM allocations GROUP BY replica_id) s ON s.replica_id = r.id
ORDER BY r.id;

-- name: ReplicaListByIDs :many
-- ReplicaListAll's columns for the replicas of ids: the fleet reconciler
-- reads back the replicas it placed in the same pass (their token is the
-- database's), instead of listing every replica a second time.
SELECT r.id, r.name, r.endpoint_id, r.version_id, r.node_id, n.name AS node, r.state, r.addr, r.gpu_type, r.profile, r.cpu_cores, r.memory_mb, r.token,
       t.name AS team, e.name AS endpoint, m.name AS model, m.task, v.name AS version, v.sim_profile,
       v.runtime, v.format, v.artifact_uri, m.feature_names, v.serving,
       e.batch_max_size, e.batch_max_queue_delay_us, e.batch_preferred_sizes, e.batch_queue_timeout_ms,
       coalesce(s.gpus, '{}')::int[] AS slot_gpus, coalesce(s.slices, '{}')::int[] AS slot_slices
FROM replicas r
JOIN nodes n ON n.id = r.node_id
JOIN teams t ON t.id = r.team_id
JOIN endpoints e ON e.id = r.endpoint_id
JOIN models m ON m.id = e.model_id
JOIN model_versions v ON v.id = r.version_id
LEFT JOIN (SELECT replica_id, array_agg(gpu ORDER BY gpu, slice) AS gpus, array_agg(slice ORDER BY gpu, slice) AS slices
           FROM allocations WHERE replica_id = ANY(@ids::bigint[]) GROUP BY replica_id) s ON s.replica_id = r.id
WHERE r.id = ANY(@ids::bigint[])
ORDER BY r.id;

-- name: ReplicaListReadyForRoutes :many
-- The replicas a gateway may send requests to, for package route.
SELECT endpoint_id, version_id, name, addr, token, server_name FROM replicas
WHERE state = 'ready' AND addr <> ''
ORDER BY endpoint_id, version_id, id;

-- name: ReplicaListReadyForRoute :many
-- ReplicaListReadyForRoutes for one endpoint, with the same columns.
SELECT endpoint_id, version_id, name, addr, token, server_name FROM replicas
WHERE endpoint_id = @endpoint_id AND state = 'ready' AND addr <> ''
ORDER BY version_id, id;

-- name: ReplicaNextIDs :many
SELECT nextval('replicas_id_seq')::bigint AS id FROM generate_series(1, @n::int);

-- name: ReplicaInsertMany :exec
INSERT INTO replicas (id, name, team_id, endpoint_id, version_id, node_id, gpu_type, profile, cpu_cores, memory_mb, placement_note)
SELECT unnest(@ids::bigint[]), unnest(@names::text[]), unnest(@owner_teams::bigint[]), unnest(@endpoint_ids::bigint[]),
       unnest(@version_ids::bigint[]), unnest(@node_ids::bigint[]), unnest(@gpu_types::text[]), unnest(@profiles::text[]),
       unnest(@cpu_cores::int[]), unnest(@memory_mbs::int[]), unnest(@notes::text[]);

-- name: ReplicaDeleteByIDs :exec
DELETE FROM replicas WHERE id = ANY(@ids::bigint[]);

-- name: ReplicaDeleteOnLostNodes :many
DELETE FROM replicas r USING nodes n
WHERE r.node_id = n.id AND n.state = 'lost'
RETURNING r.name, r.endpoint_id;

-- name: ReplicaDeleteByNode :exec
DELETE FROM replicas WHERE node_id = @node_id;

-- name: ReplicaDeleteOnChangedSlices :exec
-- The node's replicas holding a slice its new inventory (the arrays) does
-- not have alike; those whose slices are all still there keep them.
DELETE FROM replicas r
WHERE r.node_id = @node_id AND EXISTS (
    SELECT 1 FROM allocations a
    JOIN gpu_slices s ON s.node_id = a.node_id AND s.gpu = a.gpu AND s.slice = a.slice
    WHERE a.replica_id = r.id AND (s.gpu, s.slice, s.gpu_type, s.profile) NOT IN (
        SELECT unnest(@gpus::int[]), unnest(@slices::int[]), unnest(@gpu_types::text[]), unnest(@profiles::text[])));

-- name: ReplicaObserve :many
UPDATE replicas r SET state = u.state, addr = u.addr, server_name = u.server_name, reason = u.reason, failures = u.failures, updated_at = now()
FROM (SELECT unnest(@names::text[]) AS name, unnest(@states::text[]) AS state,
             unnest(@addrs::text[]) AS addr, unnest(@server_names::text[]) AS server_name,
             unnest(@reasons::text[]) AS reason, unnest(@failures::int[]) AS failures) u
WHERE r.name = u.name AND r.node_id = @node_id
  AND (r.state, r.addr, r.server_name, r.reason, r.failures) IS DISTINCT FROM (u.state, u.addr, u.server_name, u.reason, u.failures)
RETURNING r.endpoint_id;

-- name: ReplicaObserveLaunch :exec
-- Records the launch a heartbeat reports for the node's replicas;
-- @launches is a JSON object from replica name to its proto.Launch. A row
-- is written only when its launch changed: every heartbeat repeats it,
-- and one that repeats it writes nothing.
UPDATE replicas r SET launch = u.launch
FROM jsonb_each(@launches::jsonb) AS u(name, launch)
WHERE r.name = u.name AND r.node_id = @node_id AND r.launch IS DISTINCT FROM u.launch;

-- name: ReplicaListByEndpoint :many
SELECT r.name, v.name AS version, n.name AS node, r.state, r.addr, r.reason, r.gpu_type, r.profile, r.created_at, r.updated_at,
       r.failures, r.placement_note, r.metrics, r.launch,
       coalesce((SELECT array_agg(a.gpu ORDER BY a.gpu, a.slice) FROM allocations a WHERE a.replica_id = r.id), '{}')::int[] AS slot_gpus,
       coalesce((SELECT array_agg(a.slice ORDER BY a.gpu, a.slice) FROM allocations a WHERE a.replica_id = r.id), '{}')::int[] AS slot_slices
FROM replicas r
JOIN nodes n ON n.id = r.node_id
JOIN model_versions v ON v.id = r.version_id
WHERE r.endpoint_id = @endpoint_id AND (@all_teams::boolean OR r.team_id = ANY(@team_ids::bigint[]))
ORDER BY v.name, r.name;

-- name: ReplicaCountReady :one
SELECT count(*) FILTER (WHERE state = 'ready')::int AS ready, count(*)::int AS placed
FROM replicas
WHERE endpoint_id = @endpoint_id AND version_id = @version_id AND (@all_teams::boolean OR team_id = ANY(@team_ids::bigint[]));

-- name: ReplicaListCPUHolds :many
-- What every CPU replica on a ready node holds, for placement.
SELECT n.name AS node, r.name, e.name AS endpoint, r.cpu_cores, r.memory_mb
FROM replicas r
JOIN nodes n ON n.id = r.node_id
JOIN endpoints e ON e.id = r.endpoint_id
WHERE r.cpu_cores > 0 AND n.state = 'ready'
ORDER BY n.name, r.id;

-- name: ReplicaCPUUseByNode :many
-- The cores and memory CPU replicas hold per node, for the fleet page.
SELECT node_id, sum(cpu_cores)::int AS cpu_cores, sum(memory_mb)::int AS memory_mb
FROM replicas WHERE cpu_cores > 0
GROUP BY node_id;

-- name: ReplicaMoveFailing :many
-- Removes every replica that failed @min_failures times in a row on its
-- node and keeps that node out of its version's placement until @until.
WITH failing AS (
    DELETE FROM replicas r
    WHERE r.state = 'failed' AND r.failures >= @min_failures::int
    RETURNING r.endpoint_id, r.version_id, r.node_id, r.name, r.failures, r.reason
), excluded AS (
    INSERT INTO placement_exclusions (endpoint_id, version_id, node_id, replica, failures, reason, created_at, expires_at)
    -- One row per key: two replicas of a version failing on one node
    -- must not make ON CONFLICT touch a row twice.
    SELECT DISTINCT ON (endpoint_id, version_id, node_id) endpoint_id, version_id, node_id, name, failures, reason,
           @now::timestamptz, @until::timestamptz
    FROM failing ORDER BY endpoint_id, version_id, node_id, name
    ON CONFLICT (endpoint_id, version_id, node_id) DO UPDATE
        SET replica = EXCLUDED.replica, failures = EXCLUDED.failures, reason = EXCLUDED.reason,
            created_at = EXCLUDED.created_at, expires_at = EXCLUDED.expires_at
)
SELECT f.endpoint_id, f.version_id, n.name AS node, f.name, f.failures, f.reason
FROM failing f JOIN nodes n ON n.id = f.node_id
ORDER BY f.name;

-- name: ReplicaListForQuota :many
-- One team's replicas with what each holds and its version's minimum, to
-- refuse a quota below what the minimums hold.
SELECT r.id, r.endpoint_id, e.name AS endpoint, r.version_id, e.min_replicas, r.state, r.gpu_type, r.profile, r.cpu_cores,
       (SELECT count(*) FROM allocations a WHERE a.replica_id = r.id)::int AS slots, r.memory_mb
FROM replicas r JOIN endpoints e ON e.id = r.endpoint_id
WHERE r.team_id = @team_id
ORDER BY r.endpoint_id, r.version_id, r.id;

-- name: ReplicaListForScrape :many
-- The ready replicas Prometheus may scrape (package scrape): where each
-- listens, what its version runs on and the labels of its target. Replicas
-- of simulated nodes (runtimes '{*}') export no metrics and are left out.
SELECT r.name, r.addr, r.gpu_type, t.name AS team, e.name AS endpoint, v.name AS version, n.name AS node,
       v.runtime, v.gpu_count
FROM replicas r
JOIN nodes n ON n.id = r.node_id
JOIN teams t ON t.id = r.team_id
JOIN endpoints e ON e.id = r.endpoint_id
JOIN model_versions v ON v.id = r.version_id
WHERE r.state = 'ready' AND r.addr <> '' AND NOT coalesce('*' = ANY(n.runtimes), false)
ORDER BY e.name, v.name, r.name;
