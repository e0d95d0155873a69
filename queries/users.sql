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

-- name: UserGetByIdentity :one
SELECT * FROM users WHERE issuer = @issuer AND subject = @subject;

-- UserCreateIfMissing adds a user first seen through a bearer token. Unlike
-- UserUpsert it leaves an existing row alone: an access token often carries
-- no email or name, and must not blank what the last login wrote.
-- name: UserCreateIfMissing :exec
INSERT INTO users (issuer, subject, email, name)
VALUES (@issuer, @subject, @email, @name)
ON CONFLICT (issuer, subject) DO NOTHING;

-- UserListByEmail returns up to two users with the email, so a caller can
-- tell one user from an email several users share (two issuers, an address
-- that moved). The empty email names nobody.
-- name: UserListByEmail :many
SELECT * FROM users WHERE email = @email AND email <> '' ORDER BY id LIMIT 2;
