-- Scale-to-zero wake-up: woken_at is when a gateway last asked for a
-- replica of the endpoint (proto.WakeSubject). The fleet reconciler keeps
-- max(min_replicas, 1) replicas of an endpoint woken within its idle grace
-- period, and lets an endpoint with min_replicas 0 go back to zero after it.
ALTER TABLE endpoints ADD COLUMN woken_at timestamptz;

-- Budget alerts now write their event to the outbox in the alert's own
-- transaction (chargeback.Budgets.Check); the separate publish bookkeeping
-- is gone.
ALTER TABLE budget_alerts DROP COLUMN published_at;
