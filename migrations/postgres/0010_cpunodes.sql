-- CPU nodes (docs/decisions.md, "CPU nodes"). A version that needs no GPU
-- (gpu_count 0) states the whole CPU cores and the memory one replica of it
-- needs; 0 in either reads as the registry's default (1 core, 1024 MB), so
-- versions registered before this migration are CPU versions of that size.
ALTER TABLE model_versions ADD COLUMN cpu_cores integer NOT NULL DEFAULT 0 CHECK (cpu_cores >= 0);
ALTER TABLE model_versions ADD COLUMN memory_mb integer NOT NULL DEFAULT 0 CHECK (memory_mb >= 0);

-- A CPU node's inventory: its allocatable cores and memory as its agent
-- reports them (--cpus, --memory). A GPU node has 0 in both.
ALTER TABLE nodes ADD COLUMN cpu_cores integer NOT NULL DEFAULT 0 CHECK (cpu_cores >= 0);
ALTER TABLE nodes ADD COLUMN memory_mb integer NOT NULL DEFAULT 0 CHECK (memory_mb >= 0);

-- A CPU replica's allocation: whole cores and memory on its node, with
-- gpu_type 'cpu' and profile 'cpu-core' and no rows in allocations. Passes
-- place under the exclusive placement lock, which keeps a node's sum within
-- its inventory; the agent checks the sum again and fails what does not fit.
ALTER TABLE replicas ADD COLUMN cpu_cores integer NOT NULL DEFAULT 0 CHECK (cpu_cores >= 0);
ALTER TABLE replicas ADD COLUMN memory_mb integer NOT NULL DEFAULT 0 CHECK (memory_mb >= 0);

-- The default CPU price, per core-hour: $0.04, about what a cloud vCPU of a
-- general-purpose instance costs. Usage rows of CPU replicas carry
-- gpu_type 'cpu' and profile 'cpu-core', one row per allocated core per
-- second, so this rate prices them like any GPU slice.
INSERT INTO cost_rates (gpu_type, profile, uusd_per_hour, effective_from, created_by) VALUES
    ('cpu', 'cpu-core', 40000, '1970-01-01', 'default');
