-- Call access an endpoint's owners granted another team (issue 29 point 3,
-- package grant). team_id is the consumer; the endpoint's own team_id is
-- the owner. The limits apply to the consumer's requests only, at every
-- gateway: rate_limit_rps (bursts of rate_limit_burst, the rate rounded up
-- when 0) per gateway, 0 unlimited; daily_quota requests per UTC day
-- across gateways, 0 unlimited. sampling says whether the consumer's
-- requests may be sampled into prediction_samples (the endpoint's own
-- sampling rate still applies). Revoking deletes the row; the audit log
-- keeps what it was.
CREATE TABLE endpoint_grants (
    id               bigserial PRIMARY KEY,
    endpoint_id      bigint NOT NULL REFERENCES endpoints (id) ON DELETE CASCADE,
    team_id          bigint NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
    rate_limit_rps   double precision NOT NULL DEFAULT 0 CHECK (rate_limit_rps >= 0),
    rate_limit_burst integer NOT NULL DEFAULT 0 CHECK (rate_limit_burst >= 0),
    daily_quota      bigint NOT NULL DEFAULT 0 CHECK (daily_quota >= 0),
    sampling         boolean NOT NULL DEFAULT false,
    granted_by       text NOT NULL,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    UNIQUE (endpoint_id, team_id)
);
CREATE INDEX endpoint_grants_team ON endpoint_grants (team_id);
