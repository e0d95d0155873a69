-- What heartbeats say beyond placement, for people and the autoscaler: each
-- replica's load (queue depth, in-flight, batch, KV use, requests, tokens/s,
-- TTFT) and its cold start split into download, verify, load and warm-up,
-- as fleet.ReplicaMetrics in JSON; and each node's artifact cache
-- (proto.CacheStatus), NULL for an agent that keeps none. Both are the
-- latest heartbeat's word, overwritten by the next.
ALTER TABLE replicas ADD COLUMN metrics jsonb NOT NULL DEFAULT '{}';
ALTER TABLE nodes ADD COLUMN cache jsonb;
