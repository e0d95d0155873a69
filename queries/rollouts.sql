-- name: RolloutCreate :one
INSERT INTO rollouts (team_id, endpoint_id, from_version_id, to_version_id, strategy, steps, criteria,
    eval_interval_ms, eval_window_ms, keep_ms, initiator, initiator_user_id, created_at, updated_at)
VALUES (@team_id, @endpoint_id, @from_version_id, @to_version_id, @strategy, @steps, @criteria,
    @eval_interval_ms, @eval_window_ms, @keep_ms, @initiator, sqlc.narg(initiator_user_id), @now, @now)
RETURNING id;

-- name: RolloutGet :one
SELECT r.*, e.name AS endpoint, t.name AS team, m.task, e.min_replicas,
       fv.name AS from_version, tv.name AS to_version, tv.model_id, tv.p99_latency_ms AS sla_p99_ms, tv.p99_tpot_ms AS sla_p99_tpot_ms,
       coalesce((SELECT u.email FROM users u WHERE u.id = r.initiator_user_id), '')::text AS initiator_email
FROM rollouts r
JOIN endpoints e ON e.id = r.endpoint_id
JOIN teams t ON t.id = r.team_id
JOIN models m ON m.id = e.model_id
JOIN model_versions fv ON fv.id = r.from_version_id
JOIN model_versions tv ON tv.id = r.to_version_id
WHERE r.id = @id AND (@all_teams::boolean OR r.team_id = ANY(@team_ids::bigint[]));

-- name: RolloutGetForUpdate :one
SELECT r.*, e.name AS endpoint, t.name AS team, m.task, e.min_replicas,
       fv.name AS from_version, tv.name AS to_version, tv.model_id, tv.p99_latency_ms AS sla_p99_ms, tv.p99_tpot_ms AS sla_p99_tpot_ms,
       coalesce((SELECT u.email FROM users u WHERE u.id = r.initiator_user_id), '')::text AS initiator_email
FROM rollouts r
JOIN endpoints e ON e.id = r.endpoint_id
JOIN teams t ON t.id = r.team_id
JOIN models m ON m.id = e.model_id
JOIN model_versions fv ON fv.id = r.from_version_id
JOIN model_versions tv ON tv.id = r.to_version_id
WHERE r.id = @id AND (@all_teams::boolean OR r.team_id = ANY(@team_ids::bigint[]))
FOR UPDATE OF r;

-- name: RolloutListByEndpoint :many
SELECT r.*, e.name AS endpoint, t.name AS team, m.task, e.min_replicas,
       fv.name AS from_version, tv.name AS to_version, tv.model_id, tv.p99_latency_ms AS sla_p99_ms, tv.p99_tpot_ms AS sla_p99_tpot_ms,
       coalesce((SELECT u.email FROM users u WHERE u.id = r.initiator_user_id), '')::text AS initiator_email
FROM rollouts r
JOIN endpoints e ON e.id = r.endpoint_id
JOIN teams t ON t.id = r.team_id
JOIN models m ON m.id = e.model_id
JOIN model_versions fv ON fv.id = r.from_version_id
JOIN model_versions tv ON tv.id = r.to_version_id
WHERE r.endpoint_id = @endpoint_id AND (@all_teams::boolean OR r.team_id = ANY(@team_ids::bigint[]))
ORDER BY r.id DESC LIMIT @lim;

-- name: RolloutList :many
-- The rollouts of the caller's teams, newest first, in the given states (all
-- states when none is given): the portal's rollouts list.
SELECT r.*, e.name AS endpoint, t.name AS team, m.task, e.min_replicas,
       fv.name AS from_version, tv.name AS to_version, tv.model_id, tv.p99_latency_ms AS sla_p99_ms, tv.p99_tpot_ms AS sla_p99_tpot_ms,
       coalesce((SELECT u.email FROM users u WHERE u.id = r.initiator_user_id), '')::text AS initiator_email
FROM rollouts r
JOIN endpoints e ON e.id = r.endpoint_id
JOIN teams t ON t.id = r.team_id
JOIN models m ON m.id = e.model_id
JOIN model_versions fv ON fv.id = r.from_version_id
JOIN model_versions tv ON tv.id = r.to_version_id
WHERE (@all_teams::boolean OR r.team_id = ANY(@team_ids::bigint[]))
  AND (cardinality(@states::text[]) = 0 OR r.state = ANY(@states::text[]))
ORDER BY r.id DESC LIMIT @lim;

-- name: RolloutListAwaitingApproval :many
SELECT r.*, e.name AS endpoint, t.name AS team, m.task, e.min_replicas,
       fv.name AS from_version, tv.name AS to_version, tv.model_id, tv.p99_latency_ms AS sla_p99_ms, tv.p99_tpot_ms AS sla_p99_tpot_ms,
       coalesce((SELECT u.email FROM users u WHERE u.id = r.initiator_user_id), '')::text AS initiator_email
FROM rollouts r
JOIN endpoints e ON e.id = r.endpoint_id
JOIN teams t ON t.id = r.team_id
JOIN models m ON m.id = e.model_id
JOIN model_versions fv ON fv.id = r.from_version_id
JOIN model_versions tv ON tv.id = r.to_version_id
WHERE r.state = 'awaiting_approval' AND (@all_teams::boolean OR r.team_id = ANY(@team_ids::bigint[]))
ORDER BY r.id;

-- name: RolloutActiveByEndpoint :one
SELECT r.id, tv.name AS to_version, r.state
FROM rollouts r JOIN model_versions tv ON tv.id = r.to_version_id
WHERE r.endpoint_id = @endpoint_id AND r.state IN ('starting', 'progressing', 'awaiting_approval')
  AND (@all_teams::boolean OR r.team_id = ANY(@team_ids::bigint[]));

-- name: RolloutWorkList :many
SELECT id FROM rollouts
WHERE (state IN ('starting', 'progressing', 'awaiting_approval') OR (NOT cleaned AND cleanup_at <= sqlc.arg(now)::timestamptz))
  AND (@all_teams::boolean OR team_id = ANY(@team_ids::bigint[]))
ORDER BY id;

-- name: RolloutUpdate :exec
UPDATE rollouts SET step_index = @step_index, state = @state, paused = @paused, reason = @reason,
    step_started_at = sqlc.narg(step_started_at), bake_deadline = sqlc.narg(bake_deadline),
    last_evaluated_at = sqlc.narg(last_evaluated_at), cleanup_at = sqlc.narg(cleanup_at), cleaned = @cleaned,
    finished_at = sqlc.narg(finished_at), generation = @generation, updated_at = @now
WHERE id = @id AND (@all_teams::boolean OR team_id = ANY(@team_ids::bigint[]));

-- name: RolloutExperimentArms :many
-- The arms of the endpoint's A/B experiment: a rollout neither starts on
-- a version an experiment splits users over nor leaves an arm of a
-- version it retired.
SELECT x.name AS experiment, a.version_id, v.name AS version
FROM experiment_arms a
JOIN experiments x ON x.endpoint_id = a.endpoint_id
JOIN model_versions v ON v.id = a.version_id
JOIN endpoints e ON e.id = a.endpoint_id
WHERE a.endpoint_id = @endpoint_id AND (@all_teams::boolean OR e.team_id = ANY(@team_ids::bigint[]))
ORDER BY v.name;
