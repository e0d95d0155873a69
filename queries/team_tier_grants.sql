-- name: TeamTierGrantSet :one
INSERT INTO team_tier_grants (team_id, tier, granted_by, granted_at)
VALUES (@team_id, @tier, @granted_by, @granted_at)
ON CONFLICT (team_id, tier) DO UPDATE SET granted_by = @granted_by, granted_at = @granted_at
RETURNING *;

-- name: TeamTierGrantDelete :execrows
DELETE FROM team_tier_grants WHERE team_id = @team_id AND tier = @tier;
