-- name: GPUSliceDeleteByNode :exec
DELETE FROM gpu_slices WHERE node_id = @node_id;

-- name: GPUSliceInsertMany :exec
-- A slice the node already has (kept by GPUSliceDeleteChanged) stays.
INSERT INTO gpu_slices (node_id, gpu, slice, gpu_type, profile, memory_mb)
SELECT @node_id, unnest(@gpus::int[]), unnest(@slices::int[]), unnest(@gpu_types::text[]),
       unnest(@profiles::text[]), unnest(@memory_mbs::int[])
ON CONFLICT (node_id, gpu, slice) DO NOTHING;

-- name: GPUSliceDeleteChanged :exec
-- The node's slices its new inventory (the arrays) does not have alike:
-- gone, or of another type or profile. Their allocations go with them.
DELETE FROM gpu_slices s
WHERE s.node_id = @node_id AND (s.gpu, s.slice, s.gpu_type, s.profile) NOT IN (
    SELECT unnest(@gpus::int[]), unnest(@slices::int[]), unnest(@gpu_types::text[]), unnest(@profiles::text[]));

-- name: GPUSliceListReady :many
SELECT n.name AS node, s.gpu, s.slice, s.gpu_type, s.profile, s.memory_mb,
       coalesce(r.name, '') AS owner, coalesce(e.name, '') AS owner_endpoint,
       -- The tier the holder is placed as: critical only with its team's grant.
       (CASE WHEN e.tier = 'critical' AND NOT EXISTS (SELECT 1 FROM team_tier_grants g WHERE g.team_id = e.team_id AND g.tier = 'critical')
             THEN 'standard' ELSE coalesce(e.tier, '') END)::text AS owner_tier
FROM gpu_slices s
JOIN nodes n ON n.id = s.node_id
LEFT JOIN allocations a ON a.node_id = s.node_id AND a.gpu = s.gpu AND a.slice = s.slice
LEFT JOIN replicas r ON r.id = a.replica_id
LEFT JOIN endpoints e ON e.id = r.endpoint_id
WHERE n.state = 'ready'
ORDER BY n.name, s.gpu, s.slice;

-- name: GPUSliceListByNode :many
SELECT s.gpu, s.slice, s.gpu_type, s.profile, s.memory_mb,
       coalesce(r.name, '') AS replica, coalesce(r.state, '') AS replica_state, coalesce(t.name, '') AS team,
       coalesce(e.name, '') AS endpoint, coalesce(v.name, '') AS version
FROM gpu_slices s
LEFT JOIN allocations a ON a.node_id = s.node_id AND a.gpu = s.gpu AND a.slice = s.slice
LEFT JOIN replicas r ON r.id = a.replica_id
LEFT JOIN teams t ON t.id = r.team_id
LEFT JOIN endpoints e ON e.id = r.endpoint_id
LEFT JOIN model_versions v ON v.id = r.version_id
WHERE s.node_id = @node_id
ORDER BY s.gpu, s.slice;

-- name: GPUSliceCountByNode :many
SELECT s.node_id, count(*) AS slices, count(a.replica_id) AS used, count(DISTINCT s.gpu) AS gpus
FROM gpu_slices s
LEFT JOIN allocations a ON a.node_id = s.node_id AND a.gpu = s.gpu AND a.slice = s.slice
GROUP BY s.node_id;
