-- name: RoutingRuleList :many
SELECT r.endpoint_id, r.version_id, r.weight, v.name AS version_name
FROM routing_rules r JOIN model_versions v ON v.id = r.version_id
JOIN endpoints e ON e.id = r.endpoint_id
WHERE r.endpoint_id = @endpoint_id AND (@all_teams::boolean OR e.team_id = ANY(@team_ids::bigint[]))
ORDER BY v.name;

-- name: RoutingRuleDeleteByEndpoint :exec
DELETE FROM routing_rules r USING endpoints e
WHERE r.endpoint_id = @endpoint_id AND e.id = r.endpoint_id AND (@all_teams::boolean OR e.team_id = ANY(@team_ids::bigint[]));

-- name: RoutingRuleInsert :exec
INSERT INTO routing_rules (endpoint_id, version_id, weight) VALUES (@endpoint_id, @version_id, @weight);

-- name: RoutingRuleListByEndpoints :many
SELECT r.endpoint_id, r.version_id, r.weight, v.name AS version_name
FROM routing_rules r JOIN model_versions v ON v.id = r.version_id
JOIN endpoints e ON e.id = r.endpoint_id
WHERE r.endpoint_id = ANY(@endpoint_ids::bigint[]) AND (@all_teams::boolean OR e.team_id = ANY(@team_ids::bigint[]))
ORDER BY r.endpoint_id, v.name;
