-- name: IdentityListMembers :many
SELECT u.issuer, u.subject, coalesce(u.platform_role, '')::text AS platform_role,
       coalesce(t.name, '')::text AS team, coalesce(m.role, '')::text AS role
FROM users u
LEFT JOIN team_members m ON m.user_id = u.id
LEFT JOIN teams t ON t.id = m.team_id
WHERE u.platform_role IS NOT NULL OR m.user_id IS NOT NULL
ORDER BY u.id, t.name;
