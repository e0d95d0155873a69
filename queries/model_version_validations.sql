-- name: ValidationCreate :exec
-- Queues a version's validation, in the transaction that registers it.
INSERT INTO model_version_validations (version_id, team_id) VALUES (@version_id, @team_id);

-- name: ValidationGet :one
-- A version's validation; the version id comes from a scoped version row.
SELECT * FROM model_version_validations
WHERE version_id = @version_id AND (@all_teams::boolean OR team_id = ANY(@team_ids::bigint[]));

-- name: ValidationListByVersions :many
SELECT * FROM model_version_validations
WHERE version_id = ANY(@version_ids::bigint[]) AND (@all_teams::boolean OR team_id = ANY(@team_ids::bigint[]));

-- name: ValidationClaimPending :one
-- A pending validation, locked for the validator (skipping one another
-- control plane holds), with what running it needs: round-robin by team,
-- the oldest pending version of the team whose last validation finished
-- longest ago (a team never served first), so one team queueing many
-- versions delays another's by at most one validation, not all of its own.
SELECT x.version_id, x.attempts, v.name AS version, v.format, v.runtime, v.manifest, v.serving, v.memory_mb,
       m.name AS model, m.task, m.input_schema, m.output_schema, m.feature_names
FROM model_version_validations x
JOIN model_versions v ON v.id = x.version_id
JOIN models m ON m.id = v.model_id
WHERE x.state = 'pending'
ORDER BY (SELECT max(y.finished_at) FROM model_version_validations y WHERE y.team_id = x.team_id) ASC NULLS FIRST,
         x.version_id
LIMIT 1
FOR UPDATE OF x SKIP LOCKED;

-- name: ValidationFinish :exec
UPDATE model_version_validations
SET state = @state, reason = @reason, inputs = @inputs, outputs = @outputs, load_ms = sqlc.narg(load_ms),
    latency_ms = sqlc.narg(latency_ms), attempts = attempts + 1, finished_at = now()
WHERE version_id = @version_id;

-- name: ModelVersionSetStatus :exec
UPDATE model_versions SET status = @status WHERE id = @id;

-- name: ModelVersionSetMemoryNeed :exec
-- A GGUF version's memory need, computed from its file; written once (the
-- trigger refuses changing it after).
UPDATE model_versions SET memory_need_mb = @memory_need_mb WHERE id = @id AND memory_need_mb = 0;

-- name: VersionValidateByReadyReplicas :exec
-- Versions the control plane does not validate itself (no validation row:
-- GPU and LLM runtimes) are validated by their first replica on the node
-- that reports ready, which the runtime's own warm-up gates.
UPDATE model_versions v SET status = 'validated'
WHERE v.status = 'registered'
  AND NOT EXISTS (SELECT 1 FROM model_version_validations x WHERE x.version_id = v.id)
  AND v.id IN (SELECT r.version_id FROM replicas r WHERE r.node_id = @node_id AND r.state = 'ready');
