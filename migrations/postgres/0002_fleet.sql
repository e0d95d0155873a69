-- Fleet: nodes and their GPU slices, replicas and their allocations, the
-- routing-table entries published to gateways, and GPU cost rates.

CREATE TABLE nodes (
    id                 bigserial PRIMARY KEY,
    name               text NOT NULL UNIQUE,
    state              text NOT NULL DEFAULT 'ready' CHECK (state IN ('ready', 'lost')),
    boot_id            text NOT NULL DEFAULT '',
    lease_seconds      integer NOT NULL CHECK (lease_seconds > 0),
    last_heartbeat     timestamptz NOT NULL,
    registered_at      timestamptz NOT NULL DEFAULT now(),
    -- inventory is the GPU layout (types, memory, MIG partitions) as the agent
    -- registered it; gpu_use the last reported utilisation and memory per GPU.
    inventory          jsonb NOT NULL DEFAULT '[]',
    gpu_use            jsonb NOT NULL DEFAULT '[]',
    -- generation of the desired state last written to the outbox, its hash,
    -- and the generation the agent reports as applied.
    generation         bigint NOT NULL DEFAULT 0,
    desired_hash       text NOT NULL DEFAULT '',
    applied_generation bigint NOT NULL DEFAULT 0
);

-- One row per allocatable unit: a whole GPU (slice 0 without MIG) or a MIG
-- partition.
CREATE TABLE gpu_slices (
    node_id   bigint NOT NULL REFERENCES nodes (id) ON DELETE CASCADE,
    gpu       integer NOT NULL,
    slice     integer NOT NULL,
    gpu_type  text NOT NULL,
    profile   text NOT NULL,
    memory_mb integer NOT NULL,
    PRIMARY KEY (node_id, gpu, slice)
);

CREATE TABLE replicas (
    id          bigserial PRIMARY KEY,
    name        text NOT NULL UNIQUE,
    team_id     bigint NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
    endpoint_id bigint NOT NULL REFERENCES endpoints (id) ON DELETE CASCADE,
    version_id  bigint NOT NULL REFERENCES model_versions (id),
    node_id     bigint NOT NULL REFERENCES nodes (id) ON DELETE CASCADE,
    gpu_type    text NOT NULL,
    profile     text NOT NULL,
    state       text NOT NULL DEFAULT 'placed' CHECK (state IN ('placed', 'starting', 'ready', 'failed')),
    addr        text NOT NULL DEFAULT '',
    reason      text NOT NULL DEFAULT '',
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX replicas_endpoint ON replicas (endpoint_id, version_id);
CREATE INDEX replicas_node ON replicas (node_id);
CREATE INDEX replicas_team ON replicas (team_id, id);

-- The primary key is what makes double allocation impossible, whatever the
-- placer does: two replicas can never hold one slice.
CREATE TABLE allocations (
    node_id    bigint NOT NULL,
    gpu        integer NOT NULL,
    slice      integer NOT NULL,
    replica_id bigint NOT NULL REFERENCES replicas (id) ON DELETE CASCADE,
    PRIMARY KEY (node_id, gpu, slice),
    FOREIGN KEY (node_id, gpu, slice) REFERENCES gpu_slices (node_id, gpu, slice) ON DELETE CASCADE
);
CREATE INDEX allocations_replica ON allocations (replica_id);

-- Why an endpoint's replicas could not all be placed; empty when they were.
ALTER TABLE endpoints ADD COLUMN placement_error text NOT NULL DEFAULT '';

-- The routing-table entry last published per endpoint. Keyed by name, not by
-- a foreign key, so that a deleted endpoint's entry is still known and its
-- key can be deleted from mp_routes.
CREATE TABLE route_entries (
    endpoint   text PRIMARY KEY,
    generation bigint NOT NULL,
    hash       text NOT NULL
);

-- USD per hour in micro-dollars for one GPU type and allocation profile, from
-- effective_from on. Rows are never updated: a new rate is a new row.
CREATE TABLE cost_rates (
    id             bigserial PRIMARY KEY,
    gpu_type       text NOT NULL,
    profile        text NOT NULL,
    uusd_per_hour  bigint NOT NULL CHECK (uusd_per_hour >= 0),
    effective_from timestamptz NOT NULL,
    created_by     text NOT NULL DEFAULT '',
    created_at     timestamptz NOT NULL DEFAULT now(),
    UNIQUE (gpu_type, profile, effective_from)
);

-- Defaults from the cost model of the seed documents. Rates the seed leaves
-- out are the full-GPU rate times the slice's share of the GPU's compute
-- (4g = 4/7, H100 2g = 2 x 1g), rounded to the cent; see docs/decisions.md.
INSERT INTO cost_rates (gpu_type, profile, uusd_per_hour, effective_from, created_by) VALUES
    ('A100-80GB', 'full',        3500000, '1970-01-01', 'default'),
    ('A100-80GB', 'mig-1g.10gb',  500000, '1970-01-01', 'default'),
    ('A100-80GB', 'mig-2g.20gb', 1000000, '1970-01-01', 'default'),
    ('A100-80GB', 'mig-3g.40gb', 1750000, '1970-01-01', 'default'),
    ('A100-80GB', 'mig-4g.40gb', 2000000, '1970-01-01', 'default'),
    ('A100-80GB', 'mig-7g.80gb', 3500000, '1970-01-01', 'default'),
    ('H100-80GB', 'full',        5500000, '1970-01-01', 'default'),
    ('H100-80GB', 'mig-1g.10gb',  800000, '1970-01-01', 'default'),
    ('H100-80GB', 'mig-2g.20gb', 1600000, '1970-01-01', 'default'),
    ('H100-80GB', 'mig-3g.40gb', 2750000, '1970-01-01', 'default'),
    ('H100-80GB', 'mig-4g.40gb', 3140000, '1970-01-01', 'default'),
    ('H100-80GB', 'mig-7g.80gb', 5500000, '1970-01-01', 'default');
