-- name: TeamMemberUpsert :one
INSERT INTO team_members (team_id, user_id, role) VALUES (@team_id, @user_id, @role)
ON CONFLICT (team_id, user_id) DO UPDATE SET role = EXCLUDED.role
RETURNING *;

-- name: TeamMemberDelete :execrows
DELETE FROM team_members WHERE team_id = @team_id AND user_id = @user_id;

-- name: TeamMemberListByTeam :many
SELECT m.team_id, m.user_id, m.role, m.created_at, u.email, u.name
FROM team_members m JOIN users u ON u.id = m.user_id
WHERE m.team_id = @team_id
ORDER BY u.email;

-- name: TeamMemberListByUser :many
SELECT m.team_id, m.role, t.name AS team_name
FROM team_members m JOIN teams t ON t.id = m.team_id
WHERE m.user_id = @user_id
ORDER BY t.name;

-- name: TeamAdminCount :one
SELECT count(*) FROM team_members WHERE team_id = @team_id AND role = 'admin';

-- TeamMemberListByEmail returns up to two of the team's members with the
-- email, so removing a member by email is refused when it is ambiguous.
-- name: TeamMemberListByEmail :many
SELECT m.user_id FROM team_members m JOIN users u ON u.id = m.user_id
WHERE m.team_id = @team_id AND u.email = @email AND u.email <> ''
ORDER BY m.user_id LIMIT 2;
