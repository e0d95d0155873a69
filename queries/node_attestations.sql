-- name: NodeAttestationSet :one
INSERT INTO node_attestations (node, gpus, cpu_cores, memory_mb, attested_by, attested_at)
VALUES (@node, @gpus, @cpu_cores, @memory_mb, @attested_by, @attested_at)
ON CONFLICT (node) DO UPDATE SET gpus = @gpus, cpu_cores = @cpu_cores, memory_mb = @memory_mb,
    attested_by = @attested_by, attested_at = @attested_at, refused_at = NULL, refused_reason = ''
RETURNING *;

-- name: NodeAttestationGet :one
SELECT * FROM node_attestations WHERE node = @node;

-- name: NodeAttestationRefuse :one
-- Marks node's heartbeats refused for reason (the latest kept); first is
-- true when they were not refused before: the refusal is raised then, once
-- until a heartbeat within the attestation clears the mark.
WITH old AS (SELECT o.refused_at, o.refused_reason FROM node_attestations o WHERE o.node = @node FOR UPDATE)
UPDATE node_attestations a SET refused_at = coalesce(old.refused_at, @at::timestamptz), refused_reason = @reason::text
FROM old WHERE a.node = @node
RETURNING (old.refused_at IS NULL)::bool AS first;

-- name: NodeAttestationClear :exec
UPDATE node_attestations SET refused_at = NULL, refused_reason = '' WHERE node = @node AND refused_at IS NOT NULL;
