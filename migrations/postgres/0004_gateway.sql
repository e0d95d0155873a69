-- Gateway settings of an endpoint. 0 means the gateway's configured default:
-- rate_limit_rps requests per second across callers at each gateway (bursts
-- of rate_limit_burst, the rate rounded up when 0), and timeout_ms for one
-- request upstream.
ALTER TABLE endpoints
    ADD COLUMN rate_limit_rps double precision NOT NULL DEFAULT 0
        CHECK (rate_limit_rps >= 0 AND rate_limit_rps <= 1000000),
    ADD COLUMN rate_limit_burst integer NOT NULL DEFAULT 0
        CHECK (rate_limit_burst >= 0 AND rate_limit_burst <= 1000000),
    ADD COLUMN timeout_ms integer NOT NULL DEFAULT 0
        CHECK (timeout_ms >= 0 AND timeout_ms <= 3600000);

-- An endpoint's A/B experiment: callers that send X-User-Id are assigned to
-- an arm by a stable hash of the experiment's name and the user id. At most
-- one per endpoint; gone with the endpoint.
CREATE TABLE experiments (
    endpoint_id bigint PRIMARY KEY REFERENCES endpoints (id) ON DELETE CASCADE,
    name        text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);

-- The arms of an experiment: a routed version and its share of the users,
-- in percent (the domain checks that the shares sum to 100).
CREATE TABLE experiment_arms (
    endpoint_id bigint NOT NULL REFERENCES experiments (endpoint_id) ON DELETE CASCADE,
    version_id  bigint NOT NULL REFERENCES model_versions (id),
    share       integer NOT NULL CHECK (share >= 1 AND share <= 100),
    PRIMARY KEY (endpoint_id, version_id)
);
