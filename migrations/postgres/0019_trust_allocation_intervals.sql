-- Allocation history, for attributing usage (docs/security.md, "Usage is
-- attributed by the control plane"). allocations holds only what is placed
-- now, and its rows go with their replica; usage may reach the ingest
-- consumer days later. Every allocation therefore leaves an interval here:
-- one row per GPU slot a replica holds, or one per CPU replica (cpu_cores
-- > 0, gpu and slice 0), opened in the transaction that creates the
-- allocation and closed in the one that removes it. Triggers write it, so
-- no path that places or removes replicas (a reconcile pass, a node's new
-- inventory, a lost node, a deleted endpoint or team cascading) can skip
-- it. Names are copied, not referenced: the interval outlives the replica,
-- endpoint, team and node it names.
CREATE TABLE allocation_intervals (
    id          bigserial PRIMARY KEY,
    node        text NOT NULL,
    gpu         integer NOT NULL,
    slice       integer NOT NULL,
    cpu_cores   integer NOT NULL DEFAULT 0,
    replica_id  bigint NOT NULL,
    replica     text NOT NULL,
    team_id     bigint NOT NULL,
    team        text NOT NULL,
    endpoint_id bigint NOT NULL,
    endpoint    text NOT NULL,
    model       text NOT NULL,
    version_id  bigint NOT NULL,
    version     text NOT NULL,
    gpu_type    text NOT NULL,
    profile     text NOT NULL,
    started_at  timestamptz NOT NULL DEFAULT now(),
    ended_at    timestamptz,
    -- xact is the transaction that last wrote the row (opened or closed
    -- it). A reader that keeps the xmin of its last snapshot re-reads every
    -- row written by a transaction that was not yet visible to it: a
    -- sequence would not do, as its values commit out of order.
    xact        bigint NOT NULL DEFAULT pg_current_xact_id()::text::bigint
);
CREATE INDEX allocation_intervals_xact ON allocation_intervals (xact);
CREATE INDEX allocation_intervals_open ON allocation_intervals (replica_id) WHERE ended_at IS NULL;
CREATE INDEX allocation_intervals_ended ON allocation_intervals (ended_at);

CREATE FUNCTION allocation_intervals_open_gpu() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO allocation_intervals (node, gpu, slice, replica_id, replica, team_id, team, endpoint_id, endpoint,
                                      model, version_id, version, gpu_type, profile)
    SELECT n.name, a.gpu, a.slice, r.id, r.name, r.team_id, t.name, r.endpoint_id, e.name, m.name, r.version_id, v.name,
           r.gpu_type, r.profile
    FROM new_allocations a
    JOIN replicas r ON r.id = a.replica_id
    JOIN nodes n ON n.id = r.node_id
    JOIN teams t ON t.id = r.team_id
    JOIN endpoints e ON e.id = r.endpoint_id
    JOIN models m ON m.id = e.model_id
    JOIN model_versions v ON v.id = r.version_id;
    RETURN NULL;
END $$;

CREATE TRIGGER allocations_open_intervals AFTER INSERT ON allocations
    REFERENCING NEW TABLE AS new_allocations FOR EACH STATEMENT EXECUTE FUNCTION allocation_intervals_open_gpu();

CREATE FUNCTION allocation_intervals_open_cpu() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO allocation_intervals (node, gpu, slice, cpu_cores, replica_id, replica, team_id, team, endpoint_id, endpoint,
                                      model, version_id, version, gpu_type, profile)
    SELECT n.name, 0, 0, r.cpu_cores, r.id, r.name, r.team_id, t.name, r.endpoint_id, e.name, m.name, r.version_id, v.name,
           r.gpu_type, r.profile
    FROM new_replicas r
    JOIN nodes n ON n.id = r.node_id
    JOIN teams t ON t.id = r.team_id
    JOIN endpoints e ON e.id = r.endpoint_id
    JOIN models m ON m.id = e.model_id
    JOIN model_versions v ON v.id = r.version_id
    WHERE r.cpu_cores > 0;
    RETURN NULL;
END $$;

CREATE TRIGGER replicas_open_cpu_intervals AFTER INSERT ON replicas
    REFERENCING NEW TABLE AS new_replicas FOR EACH STATEMENT EXECUTE FUNCTION allocation_intervals_open_cpu();

-- A removed replica closes all its intervals; a removed allocation (its
-- slice gone with a new GPU layout) closes its slot's.
CREATE FUNCTION allocation_intervals_close_replicas() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE allocation_intervals i SET ended_at = now(), xact = pg_current_xact_id()::text::bigint
    FROM old_replicas r
    WHERE i.replica_id = r.id AND i.ended_at IS NULL;
    RETURN NULL;
END $$;

CREATE TRIGGER replicas_close_intervals AFTER DELETE ON replicas
    REFERENCING OLD TABLE AS old_replicas FOR EACH STATEMENT EXECUTE FUNCTION allocation_intervals_close_replicas();

CREATE FUNCTION allocation_intervals_close_gpu() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE allocation_intervals i SET ended_at = now(), xact = pg_current_xact_id()::text::bigint
    FROM old_allocations a
    WHERE i.replica_id = a.replica_id AND i.gpu = a.gpu AND i.slice = a.slice AND i.cpu_cores = 0 AND i.ended_at IS NULL;
    RETURN NULL;
END $$;

CREATE TRIGGER allocations_close_intervals AFTER DELETE ON allocations
    REFERENCING OLD TABLE AS old_allocations FOR EACH STATEMENT EXECUTE FUNCTION allocation_intervals_close_gpu();

-- Allocations placed before this migration start their history now.
INSERT INTO allocation_intervals (node, gpu, slice, replica_id, replica, team_id, team, endpoint_id, endpoint,
                                  model, version_id, version, gpu_type, profile)
SELECT n.name, a.gpu, a.slice, r.id, r.name, r.team_id, t.name, r.endpoint_id, e.name, m.name, r.version_id, v.name,
       r.gpu_type, r.profile
FROM allocations a
JOIN replicas r ON r.id = a.replica_id
JOIN nodes n ON n.id = r.node_id
JOIN teams t ON t.id = r.team_id
JOIN endpoints e ON e.id = r.endpoint_id
JOIN models m ON m.id = e.model_id
JOIN model_versions v ON v.id = r.version_id;
INSERT INTO allocation_intervals (node, gpu, slice, cpu_cores, replica_id, replica, team_id, team, endpoint_id, endpoint,
                                  model, version_id, version, gpu_type, profile)
SELECT n.name, 0, 0, r.cpu_cores, r.id, r.name, r.team_id, t.name, r.endpoint_id, e.name, m.name, r.version_id, v.name,
       r.gpu_type, r.profile
FROM replicas r
JOIN nodes n ON n.id = r.node_id
JOIN teams t ON t.id = r.team_id
JOIN endpoints e ON e.id = r.endpoint_id
JOIN models m ON m.id = e.model_id
JOIN model_versions v ON v.id = r.version_id
WHERE r.cpu_cores > 0;
