-- name: RolloutEventInsert :exec
INSERT INTO rollout_events (rollout_id, team_id, at, kind, step_index, state, decision, message, actor, verdict, windows)
VALUES (@rollout_id, @team_id, @at, @kind, @step_index, @state, @decision, @message, @actor, @verdict, @windows);

-- name: RolloutEventList :many
SELECT * FROM rollout_events
WHERE rollout_id = @rollout_id AND id > @after_id AND (@all_teams::boolean OR team_id = ANY(@team_ids::bigint[]))
ORDER BY id LIMIT @lim;

-- name: RolloutEventListRecent :many
SELECT * FROM (
    SELECT * FROM rollout_events
    WHERE rollout_id = @rollout_id AND (@all_teams::boolean OR team_id = ANY(@team_ids::bigint[]))
    ORDER BY id DESC LIMIT @lim
) recent ORDER BY id;
