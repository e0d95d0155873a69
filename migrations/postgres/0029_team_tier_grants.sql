-- Tiers a platform admin granted a team (issue 25 point 9): an endpoint
-- marked critical is placed as critical (first when GPUs are short, taking
-- GPUs from lower tiers' replicas beyond their minimum) only when its team
-- holds the grant; otherwise it is placed as standard.
CREATE TABLE team_tier_grants (
    team_id    bigint NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
    tier       text NOT NULL CHECK (tier IN ('critical')),
    granted_by text NOT NULL,
    granted_at timestamptz NOT NULL,
    PRIMARY KEY (team_id, tier)
);
