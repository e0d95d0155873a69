-- name: AllocationInsertMany :exec
INSERT INTO allocations (node_id, gpu, slice, replica_id)
SELECT unnest(@node_ids::bigint[]), unnest(@gpus::int[]), unnest(@slices::int[]), unnest(@replica_ids::bigint[]);
