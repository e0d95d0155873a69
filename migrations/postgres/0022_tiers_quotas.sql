-- Team quotas and tier preemption (issue 16, "when GPUs run out").
--
-- A quota caps what one team's replicas may hold of one resource: a GPU type
-- ("A100-80GB") in GPU equivalents, where a MIG slice counts as its share of
-- the GPU's seven compute slices, or "cpu" in cores. No row: no cap. Platform
-- admins set them (fleet.Fleet.SetQuota, audited).
CREATE TABLE team_quotas (
    team_id    bigint NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
    resource   text   NOT NULL CHECK (resource ~ '^[A-Za-z0-9._-]{1,63}$'),
    amount     double precision NOT NULL CHECK (amount >= 0),
    updated_by text   NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (team_id, resource)
);

-- The last time a higher tier took replicas from an endpoint, kept while the
-- endpoint still has fewer replicas than it wants, so its page says why.
CREATE TABLE endpoint_preemptions (
    endpoint_id bigint NOT NULL PRIMARY KEY REFERENCES endpoints (id) ON DELETE CASCADE,
    by_endpoint text   NOT NULL,
    by_tier     text   NOT NULL,
    replicas    integer NOT NULL,
    at          timestamptz NOT NULL
);
