-- name: OIDCLoginTake :one
DELETE FROM oidc_logins WHERE state = @state AND created_at > @not_before RETURNING *;

-- name: OIDCLoginDeleteOld :execrows
DELETE FROM oidc_logins WHERE created_at <= @not_before;

-- OIDCLoginInsert is OIDCLoginCreate with created_at from the caller's clock,
-- the same clock OIDCLoginTake's not_before comes from.
-- name: OIDCLoginInsert :exec
INSERT INTO oidc_logins (state, nonce, code_verifier, return_to, created_at)
VALUES (@state, @nonce, @code_verifier, @return_to, @created_at);
