-- Monthly GPU budgets per team or per endpoint, and the alerts raised when a
-- month's spend passes 80 and 100 percent of one (docs/chargeback.md).

CREATE TABLE budgets (
    id           bigserial PRIMARY KEY,
    team_id      bigint NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
    -- NULL: the whole team's spend; else one endpoint of the team.
    endpoint_id  bigint REFERENCES endpoints (id) ON DELETE CASCADE,
    monthly_uusd bigint NOT NULL CHECK (monthly_uusd > 0),
    -- alert: events only. block: once the month's spend reaches the budget,
    -- no replicas beyond the endpoints' minimum (chargeback.Budgets.Blocked).
    enforcement  text NOT NULL DEFAULT 'alert' CHECK (enforcement IN ('alert', 'block')),
    updated_by   text NOT NULL DEFAULT '',
    updated_at   timestamptz NOT NULL DEFAULT now()
);

-- One budget per team and per endpoint.
CREATE UNIQUE INDEX budgets_scope ON budgets (team_id, coalesce(endpoint_id, 0));

CREATE TABLE budget_alerts (
    budget_id     bigint NOT NULL REFERENCES budgets (id) ON DELETE CASCADE,
    team_id       bigint NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
    month         date NOT NULL,
    threshold_pct integer NOT NULL CHECK (threshold_pct IN (80, 100)),
    spent_uusd    bigint NOT NULL,
    budget_uusd   bigint NOT NULL,
    forecast_uusd bigint NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    -- Set once the event went out on mp.events.<team>.
    published_at  timestamptz,
    PRIMARY KEY (budget_id, month, threshold_pct)
);
