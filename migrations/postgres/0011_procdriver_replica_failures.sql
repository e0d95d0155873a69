-- A replica that keeps failing on a node (its runtime crashes on every
-- start, never becomes ready) is placed on another node instead of being
-- retried there for ever. The agent reports its failures in a row; the
-- reconciler moves a replica at the threshold and keeps the node out of
-- that version's placement for a while.
ALTER TABLE replicas ADD COLUMN failures integer NOT NULL DEFAULT 0 CHECK (failures >= 0);
-- Why the replica is where it is, when placement had to avoid a node
-- ("not on gpu-1: failed 3 times in a row: …"); shown with the replica.
ALTER TABLE replicas ADD COLUMN placement_note text NOT NULL DEFAULT '';

-- Nodes a version of an endpoint is not placed on until expires_at, with
-- the failure that put them here.
CREATE TABLE placement_exclusions (
    endpoint_id bigint NOT NULL REFERENCES endpoints (id) ON DELETE CASCADE,
    version_id  bigint NOT NULL REFERENCES model_versions (id) ON DELETE CASCADE,
    node_id     bigint NOT NULL REFERENCES nodes (id) ON DELETE CASCADE,
    replica     text NOT NULL,
    failures    integer NOT NULL,
    reason      text NOT NULL,
    created_at  timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL,
    PRIMARY KEY (endpoint_id, version_id, node_id)
);
