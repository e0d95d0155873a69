-- Foundation: identity, teams, registry, endpoints, audit, outbox.

CREATE TABLE teams (
    id           bigserial PRIMARY KEY,
    name         text NOT NULL UNIQUE CHECK (name ~ '^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$'),
    display_name text NOT NULL DEFAULT '',
    created_at   timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE users (
    id            bigserial PRIMARY KEY,
    issuer        text NOT NULL,
    subject       text NOT NULL,
    email         text NOT NULL DEFAULT '',
    name          text NOT NULL DEFAULT '',
    -- Org-wide role; NULL for ordinary users.
    platform_role text CHECK (platform_role IN ('platform_admin', 'finance')),
    created_at    timestamptz NOT NULL DEFAULT now(),
    last_login_at timestamptz,
    UNIQUE (issuer, subject)
);

CREATE TABLE team_members (
    team_id    bigint NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
    user_id    bigint NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    role       text NOT NULL CHECK (role IN ('admin', 'engineer', 'viewer')),
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (team_id, user_id)
);
CREATE INDEX team_members_user ON team_members (user_id);

-- Server-side sessions. The cookie holds a random token; only its SHA-256 is stored.
CREATE TABLE sessions (
    id_hash      bytea PRIMARY KEY,
    user_id      bigint NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    csrf_token   text NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    last_seen_at timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL
);
CREATE INDEX sessions_user ON sessions (user_id);

-- In-flight OIDC logins: state is single use, so a replayed callback fails.
CREATE TABLE oidc_logins (
    state         text PRIMARY KEY,
    nonce         text NOT NULL,
    code_verifier text NOT NULL,
    return_to     text NOT NULL DEFAULT '/',
    created_at    timestamptz NOT NULL DEFAULT now()
);

-- API keys. team_id is NULL only for org-wide keys (platform_admin, finance).
CREATE TABLE api_keys (
    id           bigserial PRIMARY KEY,
    team_id      bigint REFERENCES teams (id) ON DELETE CASCADE,
    name         text NOT NULL,
    prefix       text NOT NULL UNIQUE,
    hash         bytea NOT NULL,
    role         text NOT NULL CHECK (role IN ('admin', 'engineer', 'viewer', 'platform_admin', 'finance')),
    created_by   bigint REFERENCES users (id) ON DELETE SET NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz,
    last_used_at timestamptz,
    revoked_at   timestamptz,
    CHECK ((team_id IS NULL) = (role IN ('platform_admin', 'finance')))
);
CREATE INDEX api_keys_team ON api_keys (team_id);

CREATE TABLE models (
    id            bigserial PRIMARY KEY,
    team_id       bigint NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
    name          text NOT NULL UNIQUE,
    task          text NOT NULL CHECK (task IN ('classification', 'regression', 'llm')),
    description   text NOT NULL DEFAULT '',
    input_schema  jsonb NOT NULL DEFAULT '{}',
    output_schema jsonb NOT NULL DEFAULT '{}',
    feature_names text[] NOT NULL DEFAULT '{}',
    created_by    text NOT NULL DEFAULT '',
    created_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX models_team ON models (team_id, id);

-- Versions are immutable once registered: the trigger below refuses updates of
-- everything but status.
CREATE TABLE model_versions (
    id              bigserial PRIMARY KEY,
    model_id        bigint NOT NULL REFERENCES models (id) ON DELETE CASCADE,
    team_id         bigint NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
    name            text NOT NULL,
    format          text NOT NULL,
    runtime         text NOT NULL,
    artifact_uri    text NOT NULL,
    manifest        jsonb NOT NULL,
    size_bytes      bigint NOT NULL DEFAULT 0,
    gpu_count       integer NOT NULL DEFAULT 1,
    gpu_memory_mb   integer NOT NULL DEFAULT 0,
    gpu_type        text NOT NULL DEFAULT '',
    p99_latency_ms  double precision,
    p99_tpot_ms     double precision,
    parent_version  text NOT NULL DEFAULT '',
    training_job    text NOT NULL DEFAULT '',
    dataset         text NOT NULL DEFAULT '',
    offline_metrics jsonb NOT NULL DEFAULT '{}',
    sim_profile     jsonb,
    status          text NOT NULL DEFAULT 'registered',
    created_by      text NOT NULL DEFAULT '',
    created_at      timestamptz NOT NULL DEFAULT now(),
    UNIQUE (model_id, name)
);
CREATE INDEX model_versions_team ON model_versions (team_id, model_id, id);

CREATE FUNCTION model_versions_immutable() RETURNS trigger AS $$
BEGIN
    IF (to_jsonb(NEW) - 'status') IS DISTINCT FROM (to_jsonb(OLD) - 'status') THEN
        RAISE EXCEPTION 'model versions are immutable';
    END IF;
    RETURN NEW;
END $$ LANGUAGE plpgsql;
CREATE TRIGGER model_versions_immutable BEFORE UPDATE ON model_versions
    FOR EACH ROW EXECUTE FUNCTION model_versions_immutable();

CREATE TABLE endpoints (
    id               bigserial PRIMARY KEY,
    team_id          bigint NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
    name             text NOT NULL UNIQUE,
    model_id         bigint NOT NULL REFERENCES models (id),
    runtime          text NOT NULL,
    instance_profile text NOT NULL,
    min_replicas     integer NOT NULL CHECK (min_replicas >= 0),
    max_replicas     integer NOT NULL CHECK (max_replicas >= 1),
    tier             text NOT NULL CHECK (tier IN ('critical', 'standard', 'batch')),
    sampling_rate    double precision NOT NULL DEFAULT 0 CHECK (sampling_rate >= 0 AND sampling_rate <= 1),
    retention_days   integer NOT NULL DEFAULT 30 CHECK (retention_days >= 1),
    status           text NOT NULL DEFAULT 'pending',
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    CHECK (min_replicas <= max_replicas)
);
CREATE INDEX endpoints_team ON endpoints (team_id, id);

CREATE TABLE routing_rules (
    endpoint_id bigint NOT NULL REFERENCES endpoints (id) ON DELETE CASCADE,
    version_id  bigint NOT NULL REFERENCES model_versions (id),
    weight      integer NOT NULL CHECK (weight >= 0 AND weight <= 100),
    PRIMARY KEY (endpoint_id, version_id)
);

CREATE TABLE audit_log (
    id          bigserial PRIMARY KEY,
    at          timestamptz NOT NULL DEFAULT now(),
    team_id     bigint REFERENCES teams (id) ON DELETE SET NULL,
    actor       text NOT NULL,
    via         text NOT NULL,
    action      text NOT NULL,
    object_type text NOT NULL,
    object_name text NOT NULL,
    before      jsonb,
    after       jsonb
);
CREATE INDEX audit_log_team ON audit_log (team_id, id);

CREATE TABLE outbox (
    id           bigserial PRIMARY KEY,
    subject      text NOT NULL,
    payload      jsonb NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    published_at timestamptz
);
CREATE INDEX outbox_unpublished ON outbox (id) WHERE published_at IS NULL;

-- Idempotency-Key records, per caller.
CREATE TABLE idempotency_keys (
    principal    text NOT NULL,
    key          text NOT NULL,
    request_hash bytea NOT NULL,
    status       integer NOT NULL,
    content_type text NOT NULL,
    location     text NOT NULL DEFAULT '',
    body         bytea NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (principal, key)
);
