-- name: PlacementExclusionDeleteExpired :exec
DELETE FROM placement_exclusions WHERE expires_at <= @now::timestamptz;

-- name: PlacementExclusionListActive :many
SELECT x.endpoint_id, x.version_id, n.name AS node, x.replica, x.failures, x.reason
FROM placement_exclusions x
JOIN nodes n ON n.id = x.node_id
WHERE x.expires_at > @now::timestamptz
ORDER BY x.endpoint_id, x.version_id, n.name;
