-- Drift scores the scheduled check (drift.Checker) computes per endpoint,
-- live version and metric, and the alerts it raises. metric is "psi:" and a
-- feature name, "kl", "w1_norm" or "completion_length_w1_norm". enough is
-- false when either window held fewer than the minimum samples; such a
-- score is shown but never alerts.
CREATE TABLE drift_scores (
    id                bigserial PRIMARY KEY,
    endpoint_id       bigint NOT NULL REFERENCES endpoints (id) ON DELETE CASCADE,
    team_id           bigint NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
    version           text NOT NULL,
    metric            text NOT NULL,
    value             double precision NOT NULL,
    threshold         double precision NOT NULL,
    reference_samples bigint NOT NULL,
    current_samples   bigint NOT NULL,
    enough            boolean NOT NULL,
    computed_at       timestamptz NOT NULL
);
CREATE INDEX drift_scores_endpoint ON drift_scores (endpoint_id, computed_at);
CREATE INDEX drift_scores_team ON drift_scores (team_id, id);

-- One row per (endpoint, version, metric) whose score is past its
-- threshold: breached_since is the first check of the unbroken run, fired_at
-- when the run outlasted the alert duration and the alert went out (NULL
-- while pending). A check within the threshold deletes the row.
CREATE TABLE drift_alerts (
    endpoint_id    bigint NOT NULL REFERENCES endpoints (id) ON DELETE CASCADE,
    team_id        bigint NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
    version        text NOT NULL,
    metric         text NOT NULL,
    value          double precision NOT NULL,
    threshold      double precision NOT NULL,
    breached_since timestamptz NOT NULL,
    fired_at       timestamptz,
    PRIMARY KEY (endpoint_id, version, metric)
);
CREATE INDEX drift_alerts_team ON drift_alerts (team_id);
