-- name: NodeJoinTokenInsert :exec
INSERT INTO node_join_tokens (token_hash, node, host, port_first, port_last, created_by, expires_at)
VALUES (@token_hash, @node, @host, @port_first, @port_last, @created_by, @expires_at);

-- name: NodeJoinTokenTake :one
UPDATE node_join_tokens SET used_at = @now
WHERE token_hash = @token_hash AND used_at IS NULL AND expires_at > @now
RETURNING *;

-- name: NodeCredentialGetForUpdate :one
SELECT * FROM node_credentials WHERE node = @node FOR UPDATE;

-- name: NodeCredentialSet :exec
INSERT INTO node_credentials (node, nats_user_key, artifact_token_hash, enrolled_at)
VALUES (@node, @nats_user_key, @artifact_token_hash, @enrolled_at)
ON CONFLICT (node) DO UPDATE SET nats_user_key = @nats_user_key, artifact_token_hash = @artifact_token_hash,
    enrolled_at = @enrolled_at, revoked_at = NULL;

-- name: NodeCredentialRevoke :one
UPDATE node_credentials SET revoked_at = @now WHERE node = @node AND revoked_at IS NULL
RETURNING *;

-- name: NodeCredentialByArtifactToken :one
SELECT * FROM node_credentials WHERE artifact_token_hash = @artifact_token_hash AND revoked_at IS NULL;

-- name: NodeRevokedKeyInsert :exec
INSERT INTO node_revoked_keys (nats_user_key, node, revoked_at) VALUES (@nats_user_key, @node, @revoked_at)
ON CONFLICT (nats_user_key) DO NOTHING;

-- name: NodeRevokedKeyList :many
SELECT nats_user_key, revoked_at FROM node_revoked_keys
UNION ALL
SELECT nats_user_key, revoked_at FROM node_credentials WHERE revoked_at IS NOT NULL;
