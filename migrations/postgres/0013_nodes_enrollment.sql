-- Node enrollment: a platform admin makes a single-use, expiring join token
-- for one node (its name and the address it may serve replicas on); the
-- node exchanges it once for its own NATS credential and artifact-download
-- token. Only digests of tokens are stored.
CREATE TABLE node_join_tokens (
    id          bigserial PRIMARY KEY,
    token_hash  text NOT NULL UNIQUE,
    node        text NOT NULL,
    host        text NOT NULL,
    port_first  integer NOT NULL CHECK (port_first BETWEEN 1 AND 65535),
    port_last   integer NOT NULL CHECK (port_last BETWEEN port_first AND 65535),
    created_by  text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL,
    used_at     timestamptz
);

-- The node's identity: the public key of its NATS user and the digest of its
-- artifact token. Revoking sets revoked_at; both stop working together. The
-- control plane re-applies every revoked NATS key at start (the account
-- JWT's revocation list is rebuilt from here).
CREATE TABLE node_credentials (
    node                text PRIMARY KEY,
    nats_user_key       text NOT NULL,
    artifact_token_hash text NOT NULL UNIQUE,
    enrolled_at         timestamptz NOT NULL,
    revoked_at          timestamptz
);

-- Keys of credentials a node had before it enrolled again: still revoked.
CREATE TABLE node_revoked_keys (
    nats_user_key text PRIMARY KEY,
    node          text NOT NULL,
    revoked_at    timestamptz NOT NULL
);
