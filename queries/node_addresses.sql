-- name: NodeAddressSet :exec
INSERT INTO node_addresses (node, host, port_first, port_last)
VALUES (@node, @host, @port_first, @port_last)
ON CONFLICT (node) DO UPDATE SET host = @host, port_first = @port_first, port_last = @port_last, updated_at = now();

-- name: NodeAddressGet :one
SELECT * FROM node_addresses WHERE node = @node;
