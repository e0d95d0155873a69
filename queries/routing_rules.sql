-- name: RoutingRuleDeleteByEndpoint :exec
DELETE FROM routing_rules r USING endpoints e
WHERE r.endpoint_id = @endpoint_id AND e.id = r.endpoint_id AND (@all_teams::boolean OR e.team_id = ANY(@team_ids::bigint[]));

-- name: RoutingRuleInsert :exec
INSERT INTO routing_rules (endpoint_id, version_id, weight, shadow_percent) VALUES (@endpoint_id, @version_id, @weight, @shadow_percent);

-- name: RoutingRuleListForPlacement :many
SELECT e.id AS endpoint_id, e.name AS endpoint, e.team_id, t.name AS team, e.tier, e.instance_profile,
       e.min_replicas, m.name AS model, m.task, v.id AS version_id, v.name AS version, v.gpu_count,
       v.gpu_memory_mb, v.gpu_type, r.weight, r.shadow_percent, m.input_schema, m.feature_names, e.sampling_rate,
       e.rate_limit_rps, e.rate_limit_burst, e.timeout_ms, e.woken_at,
       EXISTS (SELECT 1 FROM experiment_arms a WHERE a.endpoint_id = e.id AND a.version_id = v.id)::boolean AS experiment_arm
FROM routing_rules r
JOIN endpoints e ON e.id = r.endpoint_id
JOIN teams t ON t.id = e.team_id
JOIN models m ON m.id = e.model_id
JOIN model_versions v ON v.id = r.version_id
ORDER BY e.id, v.id;

-- name: RoutingRuleListByEndpoint :many
SELECT r.version_id, v.name AS version, r.weight, r.shadow_percent
FROM routing_rules r JOIN endpoints e ON e.id = r.endpoint_id JOIN model_versions v ON v.id = r.version_id
WHERE r.endpoint_id = @endpoint_id AND (@all_teams::boolean OR e.team_id = ANY(@team_ids::bigint[]))
ORDER BY v.name;

-- name: RoutingRuleUpsert :exec
INSERT INTO routing_rules (endpoint_id, version_id, weight, shadow_percent)
VALUES (@endpoint_id, @version_id, @weight, @shadow_percent)
ON CONFLICT (endpoint_id, version_id) DO UPDATE SET weight = EXCLUDED.weight, shadow_percent = EXCLUDED.shadow_percent;

-- name: RoutingRuleDeleteVersion :exec
DELETE FROM routing_rules r USING endpoints e
WHERE r.endpoint_id = @endpoint_id AND r.version_id = @version_id AND e.id = r.endpoint_id
  AND (@all_teams::boolean OR e.team_id = ANY(@team_ids::bigint[]));
