-- The idempotency sweep deletes expired records in bounded batches, oldest
-- first (queries/idempotency_keys.sql, IdempotencyDeleteOld); each batch
-- finds its rows by this index instead of scanning the table.
CREATE INDEX idempotency_keys_created ON idempotency_keys (created_at);
