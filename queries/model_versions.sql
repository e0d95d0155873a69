-- name: ModelVersionCreate :one
INSERT INTO model_versions (model_id, team_id, name, format, runtime, artifact_uri, manifest, size_bytes,
    gpu_count, gpu_memory_mb, gpu_type, p99_latency_ms, p99_tpot_ms, parent_version, training_job, dataset,
    offline_metrics, sim_profile, created_by, cpu_cores, memory_mb, created_by_user_id, created_by_key_id, serving)
VALUES (@model_id, @team_id, @name, @format, @runtime, @artifact_uri, @manifest, @size_bytes,
    @gpu_count, @gpu_memory_mb, @gpu_type, sqlc.narg(p99_latency_ms), sqlc.narg(p99_tpot_ms), @parent_version,
    @training_job, @dataset, @offline_metrics, sqlc.narg(sim_profile), @created_by, @cpu_cores, @memory_mb,
    sqlc.narg(created_by_user_id), sqlc.narg(created_by_key_id), @serving)
RETURNING *;

-- name: ModelVersionGet :one
SELECT * FROM model_versions
WHERE model_id = @model_id AND name = @name AND (@all_teams::boolean OR team_id = ANY(@team_ids::bigint[]));

-- name: ModelVersionListAllByModel :many
SELECT * FROM model_versions
WHERE model_id = @model_id AND (@all_teams::boolean OR team_id = ANY(@team_ids::bigint[]))
ORDER BY id;

-- name: ModelVersionListByModelName :many
SELECT v.* FROM model_versions v JOIN models m ON m.id = v.model_id
WHERE m.name = @model_name AND (@all_teams::boolean OR v.team_id = ANY(@team_ids::bigint[])) AND v.id > @after_id
ORDER BY v.id LIMIT @lim;

-- name: ModelVersionDigestsInUse :many
-- Which of the given blob digests the manifest of any version, of any team,
-- lists: a failed upload's blobs are removed only when none does.
SELECT DISTINCT f.value::text AS digest
FROM model_versions v, jsonb_each_text(v.manifest) AS f
WHERE f.value = ANY(@digests::text[]);

-- name: ModelVersionDigestReferenced :one
-- Whether any version, of any team, lists the digest as one of its files or
-- has it as its manifest's: node agents may fetch only what a version needs.
SELECT (EXISTS (SELECT 1 FROM model_versions v, jsonb_each_text(v.manifest) AS f WHERE f.value = @digest::text)
     OR EXISTS (SELECT 1 FROM model_versions v WHERE v.artifact_uri = 'sha256-manifest:' || @digest::text))::boolean AS referenced;

-- name: ModelVersionManifestByDigest :one
-- The manifest whose canonical form hashes to the digest, of any team's
-- version: the artifact store serves it to node agents by that digest.
SELECT v.manifest FROM model_versions v
WHERE v.artifact_uri = 'sha256-manifest:' || @digest::text
ORDER BY v.id LIMIT 1;

-- name: ModelVersionCreateGraph :one
-- A graph version: a version of a graph model whose definition is graph
-- (docs/decisions.md). It has no artifact, needs no replica and is valid
-- once saved: endpoint.Service validated the definition before.
INSERT INTO model_versions (model_id, team_id, name, format, runtime, artifact_uri, manifest, gpu_count,
    parent_version, status, graph, created_by, created_by_user_id, created_by_key_id)
VALUES (@model_id, @team_id, @name, 'graph', 'graph', 'graph:' || @name::text, '{}', 0,
    @parent_version, 'validated', @graph, @created_by, sqlc.narg(created_by_user_id), sqlc.narg(created_by_key_id))
RETURNING id, name, created_at;

-- name: ModelVersionListGraphs :many
-- A graph endpoint's versions with their definitions and their weights
-- (-1 when not routed).
SELECT v.id, v.name, v.graph, v.parent_version, v.created_by, v.created_at,
       coalesce(r.weight, -1)::integer AS weight
FROM model_versions v
LEFT JOIN routing_rules r ON r.version_id = v.id AND r.endpoint_id = @endpoint_id
WHERE v.model_id = @model_id AND v.graph IS NOT NULL AND (@all_teams::boolean OR v.team_id = ANY(@team_ids::bigint[]))
ORDER BY v.id;
