-- name: OIDCLoginCreate :exec
INSERT INTO oidc_logins (state, nonce, code_verifier, return_to) VALUES (@state, @nonce, @code_verifier, @return_to);

-- name: OIDCLoginTake :one
DELETE FROM oidc_logins WHERE state = @state AND created_at > @not_before RETURNING *;

-- name: OIDCLoginDeleteOld :execrows
DELETE FROM oidc_logins WHERE created_at <= @not_before;
