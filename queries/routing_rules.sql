-- name: RoutingRuleDeleteByEndpoint :exec
DELETE FROM routing_rules r USING endpoints e
WHERE r.endpoint_id = @endpoint_id AND e.id = r.endpoint_id AND (@all_teams::boolean OR e.team_id = ANY(@team_ids::bigint[]));

-- name: RoutingRuleInsert :exec
INSERT INTO routing_rules (endpoint_id, version_id, weight) VALUES (@endpoint_id, @version_id, @weight);
