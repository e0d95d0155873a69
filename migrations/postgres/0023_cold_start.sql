-- The cold starts a version's replicas measured (download, verify, load and
-- warm-up, in milliseconds), the latest five, oldest first. The heartbeat
-- intake appends one when a replica first reports ready with its cold start;
-- package route carries their median in the routing entry of an endpoint
-- scaled to zero, so that gateways answer 202 with a Retry-After that
-- reflects how long a replica of the version takes to start. Replicas come
-- and go (a scaled-to-zero endpoint has none most of the time), so the
-- figures are kept per version, in a table of their own: versions are
-- immutable.
CREATE TABLE version_cold_starts (
    version_id     bigint PRIMARY KEY REFERENCES model_versions (id) ON DELETE CASCADE,
    cold_starts_ms bigint[] NOT NULL
);
-- Set once a replica's cold start is counted there, so that it is counted
-- once: a later heartbeat whose runtime metrics could not be read reports
-- the cold start without its load and warm-up, and the next one with them
-- again.
ALTER TABLE replicas ADD COLUMN cold_start_recorded boolean NOT NULL DEFAULT false;
