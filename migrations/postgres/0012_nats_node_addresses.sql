-- The address each node may serve replicas on, registered by the platform
-- (enrollment, or `modelplane dev` for its simulated nodes), never by the
-- agent's heartbeat: a replica reported at another host, or outside the
-- node's port range, is not recorded (fleet.Observe). Keyed by the node's
-- name, since a nodes row is re-created when its GPU layout changes.
CREATE TABLE node_addresses (
    node       text PRIMARY KEY,
    host       text NOT NULL,
    -- The ports replicas may listen on, inclusive. On a machine of its own
    -- a node takes every port; nodes sharing a host (dev) split them.
    port_first integer NOT NULL DEFAULT 1 CHECK (port_first BETWEEN 1 AND 65535),
    port_last  integer NOT NULL DEFAULT 65535 CHECK (port_last BETWEEN port_first AND 65535),
    updated_at timestamptz NOT NULL DEFAULT now()
);
