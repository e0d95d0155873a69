-- Notifications (docs/operations.md, "Alerts and webhooks"): a team's
-- webhooks, and every delivery of an event to a webhook or to Alertmanager,
-- written in the transaction of the change the event tells of (with its
-- outbox row), so that a notification exists exactly when the change
-- committed, and sent by a loop that retries with backoff and never holds
-- up the change.

CREATE TABLE webhooks (
    id          bigserial PRIMARY KEY,
    team_id     bigint NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
    url         text NOT NULL,
    -- event_types are "<kind>.<type>" names (rollout.state, drift.alert,
    -- budget.alert, …) or "*" for every event of the team.
    event_types text[] NOT NULL CHECK (cardinality(event_types) > 0),
    -- The signing secret, sealed with the server key named by key_id
    -- (MP_SECRET_KEY); rotating the key re-seals it.
    secret      bytea NOT NULL,
    key_id      text NOT NULL,
    created_by  text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX webhooks_team ON webhooks (team_id, id);

CREATE TABLE deliveries (
    id          bigserial PRIMARY KEY,
    team_id     bigint NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
    -- A webhook's delivery, or (webhook_id NULL) one to Alertmanager.
    webhook_id  bigint REFERENCES webhooks (id) ON DELETE CASCADE,
    event_type  text NOT NULL,
    event       jsonb NOT NULL,
    state       text NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'delivered', 'dead', 'skipped')),
    attempts    integer NOT NULL DEFAULT 0,
    next_at     timestamptz NOT NULL DEFAULT now(),
    last_status integer NOT NULL DEFAULT 0,
    last_error  text NOT NULL DEFAULT '',
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX deliveries_due ON deliveries (next_at) WHERE state = 'pending';
CREATE INDEX deliveries_webhook ON deliveries (webhook_id, id);
