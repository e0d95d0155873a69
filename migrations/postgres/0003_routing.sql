-- Shadow mirroring: a version with weight 0 and a shadow percentage above 0
-- receives a copy of that share of the endpoint's requests; its answers never
-- reach the caller.
ALTER TABLE routing_rules
    ADD COLUMN shadow_percent double precision NOT NULL DEFAULT 0
        CHECK (shadow_percent >= 0 AND shadow_percent <= 100);
