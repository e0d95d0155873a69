-- name: RoutingRuleDeleteByEndpoint :exec
DELETE FROM routing_rules r USING endpoints e
WHERE r.endpoint_id = @endpoint_id AND e.id = r.endpoint_id AND (@all_teams::boolean OR e.team_id = ANY(@team_ids::bigint[]));

-- name: RoutingRuleInsert :exec
INSERT INTO routing_rules (endpoint_id, version_id, weight, shadow_percent) VALUES (@endpoint_id, @version_id, @weight, @shadow_percent);

-- name: RoutingRuleListForPlacement :many
-- What placement needs of every routed version; the routing entry's own
-- columns are read by package route (RoutingRuleListForRoutes).
-- autoscale_desired is the autoscaler's count for the whole endpoint (NULL
-- before its first decision); the ro_ columns describe the endpoint's active
-- rollout, if any, for canary sizing (fleet/wake.go). runtime picks the
-- nodes that can run the version (placement.Request.Runtime).
-- critical_granted says whether the team may place critical endpoints as
-- critical (team_tier_grants).
SELECT e.id AS endpoint_id, e.name AS endpoint, e.team_id, e.tier, e.instance_profile, e.min_replicas, e.max_replicas,
       v.id AS version_id, v.name AS version, v.gpu_count, v.gpu_memory_mb, v.gpu_type, v.cpu_cores, v.memory_mb, v.memory_need_mb, r.weight, r.shadow_percent, e.woken_at,
       EXISTS (SELECT 1 FROM experiment_arms a WHERE a.endpoint_id = e.id AND a.version_id = v.id)::boolean AS experiment_arm,
       coalesce((SELECT a.share FROM experiment_arms a WHERE a.endpoint_id = e.id AND a.version_id = v.id), 0)::integer AS arm_share,
       c.desired AS autoscale_desired,
       coalesce(ro.from_version_id, 0)::bigint AS ro_from_version_id, coalesce(ro.to_version_id, 0)::bigint AS ro_to_version_id,
       coalesce(ro.strategy, '')::text AS ro_strategy, coalesce(ro.state, '')::text AS ro_state,
       coalesce(ro.steps, '[]')::jsonb AS ro_steps, coalesce(ro.step_index, 0)::integer AS ro_step_index, ro.bake_deadline AS ro_bake_deadline,
       v.runtime,
       EXISTS (SELECT 1 FROM team_tier_grants g WHERE g.team_id = e.team_id AND g.tier = 'critical')::boolean AS critical_granted
FROM routing_rules r
JOIN endpoints e ON e.id = r.endpoint_id
JOIN model_versions v ON v.id = r.version_id
LEFT JOIN autoscale_counts c ON c.endpoint_id = e.id
LEFT JOIN rollouts ro ON ro.endpoint_id = e.id AND ro.state IN ('starting', 'progressing', 'awaiting_approval')
WHERE v.runtime <> 'graph' -- a graph version runs in the gateways: no replica
ORDER BY e.id, v.id;

-- name: RoutingRuleListForRoutes :many
-- Every routed version with what its endpoint's routing entry carries (the
-- endpoint's columns repeat on each of its versions), for package route.
SELECT e.id AS endpoint_id, e.name AS endpoint, e.team_id, t.name AS team, m.task, m.input_schema, m.feature_names,
       e.sampling_rate, e.rate_limit_rps, e.rate_limit_burst, e.timeout_ms, e.min_replicas,
       v.id AS version_id, v.name AS version, r.weight, r.shadow_percent, v.runtime, m.name AS model,
       v.gpu_count, COALESCE(c.cold_starts_ms, '{}')::bigint[] AS cold_starts_ms, e.autoscale_policy, v.graph
FROM routing_rules r
JOIN endpoints e ON e.id = r.endpoint_id
JOIN teams t ON t.id = e.team_id
JOIN models m ON m.id = e.model_id
JOIN model_versions v ON v.id = r.version_id
LEFT JOIN version_cold_starts c ON c.version_id = v.id
ORDER BY e.id, v.id;

-- name: RoutingRuleListForRoute :many
-- RoutingRuleListForRoutes for one endpoint. It selects the same columns, so
-- that package route converts its rows into the other query's.
SELECT e.id AS endpoint_id, e.name AS endpoint, e.team_id, t.name AS team, m.task, m.input_schema, m.feature_names,
       e.sampling_rate, e.rate_limit_rps, e.rate_limit_burst, e.timeout_ms, e.min_replicas,
       v.id AS version_id, v.name AS version, r.weight, r.shadow_percent, v.runtime, m.name AS model,
       v.gpu_count, COALESCE(c.cold_starts_ms, '{}')::bigint[] AS cold_starts_ms, e.autoscale_policy, v.graph
FROM routing_rules r
JOIN endpoints e ON e.id = r.endpoint_id
JOIN teams t ON t.id = e.team_id
JOIN models m ON m.id = e.model_id
JOIN model_versions v ON v.id = r.version_id
LEFT JOIN version_cold_starts c ON c.version_id = v.id
WHERE r.endpoint_id = @endpoint_id
ORDER BY v.id;

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
