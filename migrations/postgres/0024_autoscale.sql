-- The autoscaler (issue 16, docs/autoscaling.md). An endpoint's policy is
-- autoscale_policy: the autoscale.Policy as the API writes it, less
-- min_replicas and max_replicas, which stay the endpoint's own columns (one
-- source of truth); NULL is the seed's defaults for the endpoint's task.
ALTER TABLE endpoints ADD COLUMN autoscale_policy jsonb;

-- The replica count the autoscaler decided for an endpoint, over all its
-- routed versions (the reconciler splits it by traffic share). It is the
-- control plane's memory across restarts: a new leader resumes from it, so
-- a restart mid-scale places nothing twice. No row: min_replicas.
CREATE TABLE autoscale_counts (
    endpoint_id bigint PRIMARY KEY REFERENCES endpoints (id) ON DELETE CASCADE,
    desired     integer NOT NULL CHECK (desired >= 0),
    decided_at  timestamptz NOT NULL
);

-- Every decision that changed an endpoint's count, with what it was decided
-- from (decision: autoscale.Decision as JSON, every signal's reading).
CREATE TABLE autoscale_decisions (
    id          bigserial PRIMARY KEY,
    team_id     bigint NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
    endpoint_id bigint NOT NULL REFERENCES endpoints (id) ON DELETE CASCADE,
    at          timestamptz NOT NULL,
    before      integer NOT NULL,
    after       integer NOT NULL,
    signal      text NOT NULL DEFAULT '',
    reason      text NOT NULL,
    decision    jsonb NOT NULL
);
CREATE INDEX autoscale_decisions_endpoint ON autoscale_decisions (endpoint_id, id DESC);
