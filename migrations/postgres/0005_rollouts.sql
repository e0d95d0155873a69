-- Rollouts (DESIGN.md section 8): a candidate version moved through steps of
-- traffic by the rollout controller, every verdict and state change it made,
-- and the approvals people gave. The controller keeps all of its state here,
-- so a control plane that restarts resumes from the persisted step.

CREATE TABLE rollouts (
    id                bigserial PRIMARY KEY,
    team_id           bigint NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
    endpoint_id       bigint NOT NULL REFERENCES endpoints (id) ON DELETE CASCADE,
    from_version_id   bigint NOT NULL REFERENCES model_versions (id),
    to_version_id     bigint NOT NULL REFERENCES model_versions (id),
    strategy          text NOT NULL CHECK (strategy IN ('canary', 'blue-green', 'shadow')),
    -- steps: [{"percent": 1, "bake_seconds": 600}, ...]; the last one of a
    -- canary is 100.
    steps             jsonb NOT NULL,
    -- criteria: judge.Criteria as JSON.
    criteria          jsonb NOT NULL,
    step_index        integer NOT NULL DEFAULT 0,
    -- starting: waiting for the candidate's replicas; progressing: a step is
    -- applied and judged; awaiting_approval: the step to 100 percent waits for
    -- a team admin; promoted, rolled_back, completed (a shadow ended or turned
    -- into a canary) are final.
    state             text NOT NULL DEFAULT 'starting'
        CHECK (state IN ('starting', 'progressing', 'awaiting_approval', 'promoted', 'rolled_back', 'completed')),
    paused            boolean NOT NULL DEFAULT false,
    reason            text NOT NULL DEFAULT '',
    step_started_at   timestamptz,
    bake_deadline     timestamptz,
    last_evaluated_at timestamptz,
    eval_interval_ms  bigint NOT NULL CHECK (eval_interval_ms >= 100),
    eval_window_ms    bigint NOT NULL CHECK (eval_window_ms >= 100),
    -- keep_ms: how long the losing version stays in the routing table (and
    -- its replicas up) after the rollout ends: the candidate for inspection
    -- after a rollback, the incumbent for a quick way back after promotion.
    keep_ms           bigint NOT NULL CHECK (keep_ms >= 0),
    cleanup_at        timestamptz,
    cleaned           boolean NOT NULL DEFAULT false,
    initiator         text NOT NULL,
    initiator_user_id bigint,
    -- generation counts the state changes; events carry it so that a reader
    -- orders them.
    generation        bigint NOT NULL DEFAULT 1,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    finished_at       timestamptz,
    CHECK (from_version_id <> to_version_id)
);
CREATE INDEX rollouts_team ON rollouts (team_id, endpoint_id, id);
-- One active rollout per endpoint; a second start is a conflict that names
-- the active one.
CREATE UNIQUE INDEX rollouts_one_active ON rollouts (endpoint_id)
    WHERE state IN ('starting', 'progressing', 'awaiting_approval');
-- What the controller visits: active rollouts and finished ones whose
-- losing version still waits to leave the routing table.
CREATE INDEX rollouts_work ON rollouts (id)
    WHERE state IN ('starting', 'progressing', 'awaiting_approval') OR NOT cleaned;

CREATE TABLE rollout_events (
    id         bigserial PRIMARY KEY,
    rollout_id bigint NOT NULL REFERENCES rollouts (id) ON DELETE CASCADE,
    team_id    bigint NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
    at         timestamptz NOT NULL,
    -- kind: state (a state or step change), verdict (one evaluation),
    -- approval (a person's decision).
    kind       text NOT NULL CHECK (kind IN ('state', 'verdict', 'approval')),
    step_index integer NOT NULL,
    state      text NOT NULL,
    decision   text NOT NULL DEFAULT '',
    message    text NOT NULL DEFAULT '',
    actor      text NOT NULL DEFAULT '',
    -- verdict: judge.Verdict; windows: the candidate's and incumbent's
    -- numbers the judge saw, with the window's bounds.
    verdict    jsonb,
    windows    jsonb
);
CREATE INDEX rollout_events_rollout ON rollout_events (rollout_id, id);

CREATE TABLE approvals (
    id               bigserial PRIMARY KEY,
    rollout_id       bigint NOT NULL REFERENCES rollouts (id) ON DELETE CASCADE,
    team_id          bigint NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
    step_index       integer NOT NULL,
    approver         text NOT NULL,
    approver_user_id bigint,
    decision         text NOT NULL CHECK (decision IN ('approve', 'reject')),
    comment          text NOT NULL DEFAULT '',
    at               timestamptz NOT NULL,
    UNIQUE (rollout_id, step_index)
);
