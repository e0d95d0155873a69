-- Each replica's token (docs/security.md, "Replicas answer only the
-- gateway"): the control plane makes it at placement and puts it in the
-- replica's spec (mp_desired, which only its node reads) and in the routing
-- entry (mp_routes, which only gateways read); the runtime refuses a request
-- without it. 244 random bits from two version-4 UUIDs, hashed to hex, so
-- that no extension is needed. Replicas placed before this migration get
-- one now; their runtimes learn it when restarted with the new spec.
ALTER TABLE replicas ADD COLUMN token text NOT NULL
    DEFAULT encode(sha256((gen_random_uuid()::text || gen_random_uuid()::text)::bytea), 'hex');
