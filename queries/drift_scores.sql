-- name: DriftTargetList :many
-- Every endpoint with its live versions (weight above 0), the stable one
-- first (largest weight, then name). The drift check passes all_teams.
SELECT e.id AS endpoint_id, e.name AS endpoint, e.team_id, t.name AS team, m.task, v.name AS version, r.weight, e.created_at
FROM routing_rules r
JOIN endpoints e ON e.id = r.endpoint_id
JOIN teams t ON t.id = e.team_id
JOIN models m ON m.id = e.model_id
JOIN model_versions v ON v.id = r.version_id
WHERE r.weight > 0 AND (@all_teams::boolean OR e.team_id = ANY(@team_ids::bigint[]))
ORDER BY e.id, r.weight DESC, v.name;

-- name: DriftEndpointRetention :many
-- Every endpoint's name and sample retention, for the retention loop.
SELECT e.id, e.name, e.retention_days FROM endpoints e
WHERE (@all_teams::boolean OR e.team_id = ANY(@team_ids::bigint[]))
ORDER BY e.name;

-- name: DriftScoreInsertMany :exec
INSERT INTO drift_scores (endpoint_id, team_id, version, metric, value, threshold, reference_samples, current_samples, enough, computed_at)
SELECT e.id, e.team_id, @version, m.metric, m.value, m.threshold, @reference_samples, @current_samples, @enough, @computed_at
FROM endpoints e,
     (SELECT unnest(@metrics::text[]) AS metric, unnest(@vals::double precision[]) AS value,
             unnest(@thresholds::double precision[]) AS threshold) m
WHERE e.id = @endpoint_id AND (@all_teams::boolean OR e.team_id = ANY(@team_ids::bigint[]));

-- name: DriftScoreList :many
-- An endpoint's scores since a time, oldest first.
SELECT s.version, s.metric, s.value, s.threshold, s.reference_samples, s.current_samples, s.enough, s.computed_at
FROM drift_scores s
WHERE s.endpoint_id = @endpoint_id AND s.computed_at >= @since
  AND (@all_teams::boolean OR s.team_id = ANY(@team_ids::bigint[]))
ORDER BY s.computed_at, s.version, s.metric;

-- name: DriftScoreDeleteBefore :execrows
DELETE FROM drift_scores s WHERE s.computed_at < @before
  AND (@all_teams::boolean OR s.team_id = ANY(@team_ids::bigint[]));

-- name: DriftAlertList :many
SELECT a.endpoint_id, a.version, a.metric, a.value, a.threshold, a.breached_since, a.fired_at
FROM drift_alerts a
WHERE a.endpoint_id = @endpoint_id AND (@all_teams::boolean OR a.team_id = ANY(@team_ids::bigint[]))
ORDER BY a.version, a.metric;

-- name: DriftAlertUpsert :one
-- Records a breach: a new run starts at now, an existing one keeps its
-- start and takes the latest value. Returns the run's start and whether it
-- fired already.
INSERT INTO drift_alerts AS a (endpoint_id, team_id, version, metric, value, threshold, breached_since)
SELECT e.id, e.team_id, @version, @metric, @value, @threshold, @now
FROM endpoints e WHERE e.id = @endpoint_id AND (@all_teams::boolean OR e.team_id = ANY(@team_ids::bigint[]))
ON CONFLICT (endpoint_id, version, metric) DO UPDATE SET value = excluded.value, threshold = excluded.threshold
RETURNING a.breached_since, a.fired_at;

-- name: DriftAlertFire :execrows
UPDATE drift_alerts a SET fired_at = @now
WHERE a.endpoint_id = @endpoint_id AND a.version = @version AND a.metric = @metric AND a.fired_at IS NULL
  AND (@all_teams::boolean OR a.team_id = ANY(@team_ids::bigint[]));

-- name: DriftAlertClear :many
-- Ends the runs of an endpoint's version whose metrics are not in the
-- breached list; returns the cleared ones that had fired.
DELETE FROM drift_alerts a
WHERE a.endpoint_id = @endpoint_id AND a.version = @version AND NOT (a.metric = ANY(@breached::text[]))
  AND (@all_teams::boolean OR a.team_id = ANY(@team_ids::bigint[]))
RETURNING a.metric, a.fired_at;

-- name: DriftAlertDeleteStale :many
-- Removes alerts of versions no longer live on their endpoint; returns
-- them with their endpoint's and team's names, so the fired ones are
-- resolved, not dropped silently.
WITH gone AS (
    DELETE FROM drift_alerts a
    WHERE NOT EXISTS (SELECT 1 FROM routing_rules r JOIN model_versions v ON v.id = r.version_id
                      WHERE r.endpoint_id = a.endpoint_id AND v.name = a.version AND r.weight > 0)
      AND (@all_teams::boolean OR a.team_id = ANY(@team_ids::bigint[]))
    RETURNING a.endpoint_id, a.team_id, a.version, a.metric, a.value, a.threshold, a.fired_at
)
SELECT g.endpoint_id, g.team_id, g.version, g.metric, g.value, g.threshold, g.fired_at, e.name AS endpoint, t.name AS team
FROM gone g JOIN endpoints e ON e.id = g.endpoint_id JOIN teams t ON t.id = g.team_id;
