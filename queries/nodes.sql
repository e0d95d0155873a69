-- name: NodeGetForUpdate :one
SELECT * FROM nodes WHERE name = @name FOR UPDATE;

-- name: NodeRegister :one
INSERT INTO nodes AS n (name, boot_id, lease_seconds, last_heartbeat, inventory, gpu_use, applied_generation, cpu_cores, memory_mb, cache)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
ON CONFLICT (name) DO UPDATE SET boot_id = $2, lease_seconds = $3, last_heartbeat = $4,
    inventory = $5, gpu_use = $6, applied_generation = $7, cpu_cores = $8, memory_mb = $9, cache = $10, state = 'ready'
RETURNING *;

-- name: NodeHeartbeat :exec
UPDATE nodes SET boot_id = @boot_id, lease_seconds = @lease_seconds, last_heartbeat = @last_heartbeat,
    gpu_use = @gpu_use, applied_generation = @applied_generation, cache = @cache, state = 'ready'
WHERE id = @id;

-- name: NodeMarkLost :many
UPDATE nodes SET state = 'lost'
WHERE state = 'ready' AND last_heartbeat + make_interval(0, 0, 0, 0, 0, 0, lease_seconds) < sqlc.arg(now)::timestamptz
  AND sqlc.arg(watching_since)::timestamptz + make_interval(0, 0, 0, 0, 0, 0, lease_seconds) < sqlc.arg(now)::timestamptz
RETURNING id, name;

-- name: NodeList :many
SELECT * FROM nodes ORDER BY name;

-- name: NodeGet :one
SELECT * FROM nodes WHERE name = @name;

-- name: NodeSetDesired :exec
UPDATE nodes SET generation = @generation, desired_hash = @desired_hash WHERE id = @id;

-- name: PlacementLock :exec
SELECT pg_advisory_xact_lock(7316020003);

-- name: PlacementBulkPlans :exec
SET LOCAL enable_nestloop = off;

-- name: PlacementLockShared :exec
SELECT pg_advisory_xact_lock_shared(7316020003);

-- name: NodeListCPUReady :many
-- The CPU nodes placement may use (ready, no GPUs) with their inventory.
SELECT n.name, n.cpu_cores, n.memory_mb FROM nodes n
WHERE n.state = 'ready' AND n.cpu_cores > 0 AND NOT EXISTS (SELECT 1 FROM gpu_slices s WHERE s.node_id = n.id)
ORDER BY n.name;

-- name: NodeSetRuntimes :execrows
-- Stores the runtimes a node reports, only when they changed, so that a
-- heartbeat that repeats them writes nothing; the row count says whether
-- placement has something new to read.
UPDATE nodes SET runtimes = sqlc.narg(runtimes)::text[]
WHERE id = @id AND runtimes IS DISTINCT FROM sqlc.narg(runtimes)::text[];

-- name: NodeMaxCPUMemory :one
-- The memory of the largest registered CPU node (ready or lost: a lost
-- node may come back), and how many there are; 0 and 0 without any.
SELECT coalesce(max(n.memory_mb), 0)::integer AS memory_mb, count(*)::integer AS nodes FROM nodes n
WHERE n.cpu_cores > 0 AND NOT EXISTS (SELECT 1 FROM gpu_slices s WHERE s.node_id = n.id);
