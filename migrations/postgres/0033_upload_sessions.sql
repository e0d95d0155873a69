-- Resumable uploads (issue 30): a version's files sent as chunks addressed
-- by their sha256 into an upload session, kept until the session expires,
-- so an interrupted upload resumes without sending the stored chunks
-- again. Completing the session registers the version once: version_id is
-- set in the same transaction, and a second completion answers it.
CREATE TABLE upload_sessions (
    id          text PRIMARY KEY,
    team_id     bigint NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
    model_id    bigint NOT NULL REFERENCES models (id) ON DELETE CASCADE,
    spec        jsonb NOT NULL,
    manifest    jsonb NOT NULL,
    created_by  text NOT NULL,
    created_at  timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL,
    version_id  bigint REFERENCES model_versions (id) ON DELETE SET NULL
);
CREATE INDEX upload_sessions_expires_at ON upload_sessions (expires_at);

-- The chunks a session holds; their bytes are files named by digest in
-- the session's directory of the artifact store.
CREATE TABLE upload_chunks (
    session_id text NOT NULL REFERENCES upload_sessions (id) ON DELETE CASCADE,
    team_id    bigint NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
    digest     text NOT NULL,
    size       bigint NOT NULL,
    PRIMARY KEY (session_id, digest)
);
