-- Rotating a node's credentials without downtime: the previous NATS user and
-- artifact token stay valid until prev_until, so the agent swaps to the new
-- ones while its replicas keep serving; the sweep revokes the previous NATS
-- user then (node_revoked_keys). A join token can be revoked before use.
ALTER TABLE node_credentials
    ADD COLUMN prev_nats_user_key       text,
    ADD COLUMN prev_artifact_token_hash text UNIQUE,
    ADD COLUMN prev_until               timestamptz,
    ADD COLUMN rotated_at               timestamptz;

ALTER TABLE node_join_tokens ADD COLUMN revoked_at timestamptz;
