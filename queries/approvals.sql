-- name: ApprovalInsert :exec
INSERT INTO approvals (rollout_id, team_id, step_index, approver, approver_user_id, decision, comment, at)
VALUES (@rollout_id, @team_id, @step_index, @approver, sqlc.narg(approver_user_id), @decision, @comment, @at);

-- name: ApprovalList :many
SELECT * FROM approvals
WHERE rollout_id = @rollout_id AND (@all_teams::boolean OR team_id = ANY(@team_ids::bigint[]))
ORDER BY step_index;
