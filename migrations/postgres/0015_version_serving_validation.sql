-- How a version is served by the built-in runtime: its features in order
-- (with categories and encoding), its output mapping and its sample
-- inputs, as registered. Part of the immutable version: the trigger of 0001
-- refuses changing it like every column but status.
ALTER TABLE model_versions ADD COLUMN serving jsonb NOT NULL DEFAULT '{}';

-- Validation at registration (registered → validated | invalid). A row is
-- written with the version when the control plane can run the version
-- itself (built-in runtime, uploaded files, no GPU); the validator fills in
-- the outcome, the runtime's outputs for the inputs it sent and the
-- latency, and sets the version's status in the same transaction. The
-- version row itself stays immutable: only its status changes. A
-- validation the control plane could not run at all (no ONNX Runtime
-- library on it) is skipped with the reason: the version stays registered
-- and is checked by its replicas' warm-up, as GPU versions are.
CREATE TABLE model_version_validations (
    version_id  bigint PRIMARY KEY REFERENCES model_versions (id) ON DELETE CASCADE,
    team_id     bigint NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
    state       text NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'validated', 'invalid', 'skipped')),
    reason      text NOT NULL DEFAULT '',
    inputs      jsonb NOT NULL DEFAULT '[]',
    outputs     jsonb NOT NULL DEFAULT '[]',
    load_ms     double precision,
    latency_ms  double precision,
    attempts    integer NOT NULL DEFAULT 0,
    created_at  timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz
);
CREATE INDEX model_version_validations_pending ON model_version_validations (version_id) WHERE state = 'pending';
