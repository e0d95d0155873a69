-- name: NodeJoinTokenInsert :one
INSERT INTO node_join_tokens (token_hash, node, host, port_first, port_last, created_by, created_at, expires_at)
VALUES (@token_hash, @node, @host, @port_first, @port_last, @created_by, @created_at, @expires_at)
RETURNING *;

-- name: NodeJoinTokenTake :one
UPDATE node_join_tokens SET used_at = @now
WHERE token_hash = @token_hash AND used_at IS NULL AND revoked_at IS NULL AND expires_at > @now
RETURNING *;

-- name: NodeJoinTokenByHash :one
-- Why a token did not enrol (used, revoked, expired): its holder knows the
-- token already, so saying which tells it nothing new.
SELECT * FROM node_join_tokens WHERE token_hash = @token_hash;

-- name: NodeJoinTokenList :many
SELECT * FROM node_join_tokens ORDER BY id DESC LIMIT @max;

-- name: NodeJoinTokenRevoke :one
UPDATE node_join_tokens SET revoked_at = @now
WHERE id = @id AND used_at IS NULL AND revoked_at IS NULL
RETURNING *;

-- name: NodeCredentialGetForUpdate :one
SELECT * FROM node_credentials WHERE node = @node FOR UPDATE;

-- name: NodeCredentialSet :exec
INSERT INTO node_credentials (node, nats_user_key, artifact_token_hash, enrolled_at)
VALUES (@node, @nats_user_key, @artifact_token_hash, @enrolled_at)
ON CONFLICT (node) DO UPDATE SET nats_user_key = @nats_user_key, artifact_token_hash = @artifact_token_hash,
    enrolled_at = @enrolled_at, revoked_at = NULL, prev_nats_user_key = NULL, prev_artifact_token_hash = NULL,
    prev_until = NULL, rotated_at = NULL;

-- name: NodeCredentialRotate :exec
-- The current credentials become the previous ones, valid until
-- prev_until; the new ones are current from now.
UPDATE node_credentials SET prev_nats_user_key = nats_user_key, prev_artifact_token_hash = artifact_token_hash,
    prev_until = @prev_until, nats_user_key = @nats_user_key, artifact_token_hash = @artifact_token_hash, rotated_at = @now
WHERE node = @node AND revoked_at IS NULL;

-- name: NodeCredentialRevoke :one
UPDATE node_credentials SET revoked_at = @now WHERE node = @node AND revoked_at IS NULL
RETURNING *;

-- name: NodeCredentialByArtifactToken :one
-- The node whose current artifact token, or previous one still in its
-- grace period, has this digest.
SELECT * FROM node_credentials
WHERE revoked_at IS NULL
  AND (artifact_token_hash = @artifact_token_hash
       OR (prev_artifact_token_hash = @artifact_token_hash AND prev_until > @now));

-- name: NodeCredentialByCurrentArtifactToken :one
SELECT * FROM node_credentials WHERE artifact_token_hash = @artifact_token_hash AND revoked_at IS NULL FOR UPDATE;

-- name: NodeCredentialList :many
SELECT * FROM node_credentials ORDER BY node;

-- name: NodeCredentialPrevExpired :many
-- Previous credentials whose grace period is over: the sweep revokes them.
SELECT node, prev_nats_user_key FROM node_credentials
WHERE prev_nats_user_key IS NOT NULL AND prev_until <= @now
FOR UPDATE SKIP LOCKED;

-- name: NodeCredentialPrevClear :exec
UPDATE node_credentials SET prev_nats_user_key = NULL, prev_artifact_token_hash = NULL, prev_until = NULL
WHERE node = @node;

-- name: NodeRevokedKeyInsert :exec
INSERT INTO node_revoked_keys (nats_user_key, node, revoked_at) VALUES (@nats_user_key, @node, @revoked_at)
ON CONFLICT (nats_user_key) DO NOTHING;

-- name: NodeRevokedKeyList :many
SELECT nats_user_key, revoked_at FROM node_revoked_keys
UNION ALL
SELECT nats_user_key, revoked_at FROM node_credentials WHERE revoked_at IS NOT NULL;

-- name: NodeArtifactAllowed :one
-- Whether a node may read a blob: the digest is the manifest or a file of a
-- version with a replica placed on that node (by name). Nothing else, of
-- any team, is served to it.
SELECT EXISTS (
    SELECT 1 FROM replicas r
    JOIN nodes n ON n.id = r.node_id
    JOIN model_versions v ON v.id = r.version_id
    WHERE n.name = @node
      AND (v.artifact_uri = 'sha256-manifest:' || @digest::text
           OR EXISTS (SELECT 1 FROM jsonb_each_text(v.manifest) AS f WHERE f.value = @digest::text))
)::boolean AS allowed;
