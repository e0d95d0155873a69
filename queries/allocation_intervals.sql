-- name: AllocationIntervalSnapshotXmin :one
-- The oldest transaction still running (or not yet visible) as of now:
-- every row a later read must not miss has xact >= it.
SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint AS xmin;

-- name: AllocationIntervalListSince :many
-- Every interval open now or closed after @since.
SELECT id, node, gpu, slice, cpu_cores, replica, team, endpoint, model, version, gpu_type, profile, started_at, ended_at
FROM allocation_intervals
WHERE ended_at IS NULL OR ended_at > @since::timestamptz
ORDER BY id;

-- name: AllocationIntervalListWritten :many
-- The intervals opened or closed by transactions from @xmin on.
SELECT id, node, gpu, slice, cpu_cores, replica, team, endpoint, model, version, gpu_type, profile, started_at, ended_at
FROM allocation_intervals
WHERE xact >= @xmin::bigint
ORDER BY id;

-- name: AllocationIntervalInsertMany :exec
-- Records intervals directly, for a benchmark or test that meters a
-- synthetic fleet it never placed; placement writes them by trigger. An
-- ended_at of the zero time (0001-01-01 UTC) leaves the interval open.
INSERT INTO allocation_intervals (node, gpu, slice, cpu_cores, replica_id, replica, team_id, team, endpoint_id, endpoint,
                                  model, version_id, version, gpu_type, profile, started_at, ended_at)
SELECT u.node, u.gpu, u.slice, u.cpu_cores, 0, u.replica, 0, u.team, 0, u.endpoint, u.model, 0, u.version, u.gpu_type, u.profile,
       u.started_at, nullif(u.ended_at, '0001-01-01 00:00:00+00'::timestamptz)
FROM (SELECT unnest(@nodes::text[]) AS node, unnest(@gpus::int[]) AS gpu, unnest(@slices::int[]) AS slice,
             unnest(@cpu_cores::int[]) AS cpu_cores, unnest(@replicas::text[]) AS replica, unnest(@teams::text[]) AS team,
             unnest(@endpoints::text[]) AS endpoint, unnest(@models::text[]) AS model, unnest(@versions::text[]) AS version,
             unnest(@gpu_types::text[]) AS gpu_type, unnest(@profiles::text[]) AS profile,
             unnest(@started_at::timestamptz[]) AS started_at, unnest(@ended_at::timestamptz[]) AS ended_at) u;
