-- The name a replica's certificate names when it is not the host of its
-- address (issue 26): a pod of a Kubernetes pool serves its pool's
-- certificate, <pool>.replicas.modelplane.internal, at an IP no issuer
-- knew in advance. The node's heartbeat reports it and the routing entry
-- carries it (busapi.RouteReplica.ServerName), so gateways verify that
-- name while dialling the address. Empty: the address's host.
ALTER TABLE replicas ADD COLUMN server_name text NOT NULL DEFAULT '';
