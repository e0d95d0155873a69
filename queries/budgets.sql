-- name: BudgetUpsert :one
INSERT INTO budgets (team_id, endpoint_id, monthly_uusd, enforcement, updated_by, updated_by_user_id, updated_by_key_id)
VALUES (@team_id, sqlc.narg(endpoint_id), @monthly_uusd, @enforcement, @updated_by, sqlc.narg(updated_by_user_id), sqlc.narg(updated_by_key_id))
ON CONFLICT (team_id, coalesce(endpoint_id, 0)) DO UPDATE
SET monthly_uusd = EXCLUDED.monthly_uusd, enforcement = EXCLUDED.enforcement,
    updated_by = EXCLUDED.updated_by, updated_by_user_id = EXCLUDED.updated_by_user_id,
    updated_by_key_id = EXCLUDED.updated_by_key_id, updated_at = now()
RETURNING *;

-- name: BudgetAlertsResetChanged :execrows
-- Deletes the month's alerts of the team's (or endpoint's) budget when the
-- amount about to be stored differs from the current one: the alerts, and
-- the block that a 100 percent alert means, were measured against the old
-- amount, so the checker measures again and fires them anew against the new
-- one. A changed enforcement alone keeps them: the blocking queries read the
-- enforcement of the budget as it is now. Run before BudgetUpsert, in its
-- transaction.
DELETE FROM budget_alerts a USING budgets b
WHERE a.budget_id = b.id AND a.month = @month
  AND b.team_id = @team_id AND coalesce(b.endpoint_id, 0) = coalesce(sqlc.narg(endpoint_id)::bigint, 0)
  AND b.monthly_uusd <> @monthly_uusd;

-- name: BudgetListScoped :many
SELECT b.*, t.name AS team_name, coalesce(e.name, '') AS endpoint_name
FROM budgets b JOIN teams t ON t.id = b.team_id LEFT JOIN endpoints e ON e.id = b.endpoint_id
WHERE (@all_teams::boolean OR b.team_id = ANY(@team_ids::bigint[]))
ORDER BY t.name, coalesce(e.name, '');

-- name: BudgetListAll :many
SELECT b.*, t.name AS team_name, coalesce(e.name, '') AS endpoint_name
FROM budgets b JOIN teams t ON t.id = b.team_id LEFT JOIN endpoints e ON e.id = b.endpoint_id
ORDER BY b.id;

-- name: BudgetAlertInsert :execrows
INSERT INTO budget_alerts (budget_id, team_id, month, threshold_pct, spent_uusd, budget_uusd, forecast_uusd)
VALUES (@budget_id, @team_id, @month, @threshold_pct, @spent_uusd, @budget_uusd, @forecast_uusd)
ON CONFLICT DO NOTHING;

-- name: BudgetAlertListScoped :many
SELECT a.*, t.name AS team_name, coalesce(e.name, '') AS endpoint_name
FROM budget_alerts a JOIN budgets b ON b.id = a.budget_id JOIN teams t ON t.id = a.team_id
LEFT JOIN endpoints e ON e.id = b.endpoint_id
WHERE (@all_teams::boolean OR a.team_id = ANY(@team_ids::bigint[])) AND a.month = @month
ORDER BY a.created_at DESC;

-- name: BudgetBlockingList :many
-- Every budget with block enforcement that reached 100 percent in the month:
-- the fleet reconciler places no replica beyond min_replicas for the team
-- (endpoint_id NULL) or the endpoint.
SELECT b.team_id, b.endpoint_id, t.name AS team_name, coalesce(e.name, '') AS endpoint_name, b.monthly_uusd, a.spent_uusd
FROM budget_alerts a JOIN budgets b ON b.id = a.budget_id JOIN teams t ON t.id = b.team_id
LEFT JOIN endpoints e ON e.id = b.endpoint_id
WHERE b.enforcement = 'block' AND a.threshold_pct = 100 AND a.month = @month
ORDER BY b.id;
