-- name: UserUpsert :one
INSERT INTO users (issuer, subject, email, name, last_login_at)
VALUES (@issuer, @subject, @email, @name, now())
ON CONFLICT (issuer, subject) DO UPDATE
SET email = EXCLUDED.email, name = EXCLUDED.name, last_login_at = now()
RETURNING *;

-- name: UserGet :one
SELECT * FROM users WHERE id = @id;

-- name: UserGetByEmail :one
SELECT * FROM users WHERE email = @email ORDER BY id LIMIT 1;

-- name: UserSetPlatformRole :exec
UPDATE users SET platform_role = sqlc.narg(platform_role) WHERE id = @id;
