-- What a platform admin attests a node has (issue 25 point 3): the control
-- plane believes a node's heartbeat about its GPUs, MIG layout, cores and
-- memory only up to this. gpus is a list of {"type", "count", "slices"}:
-- count GPUs of type, each laid out as slices (the slice profiles in
-- order; ["full"] for a whole GPU). refused_at and refused_reason mark a
-- node whose heartbeats currently claim more, so the refusal is raised
-- once, not at every heartbeat.
CREATE TABLE node_attestations (
    node           text PRIMARY KEY,
    gpus           jsonb NOT NULL DEFAULT '[]',
    cpu_cores      integer NOT NULL DEFAULT 0 CHECK (cpu_cores >= 0),
    memory_mb      integer NOT NULL DEFAULT 0 CHECK (memory_mb >= 0),
    attested_by    text NOT NULL,
    attested_at    timestamptz NOT NULL,
    refused_at     timestamptz,
    refused_reason text NOT NULL DEFAULT ''
);
