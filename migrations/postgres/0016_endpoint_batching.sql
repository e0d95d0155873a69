-- The built-in runtime's dynamic batcher, per endpoint (runtime/batch; seed
-- §5): requests are executed together up to batch_max_size rows, a request
-- waits at most batch_max_queue_delay_us for others to join, a batch that
-- reaches one of batch_preferred_sizes (ascending, each at most the maximum)
-- runs at once, and a request still queued after batch_queue_timeout_ms is
-- answered 503 and never executed. The defaults (32 rows, 500 µs, none
-- preferred, 1000 ms) are package endpoint's too, so endpoints created
-- before this migration batch like new ones. The values reach a replica in
-- its spec (runtime/model.Config.Batching): a change restarts the replica.
ALTER TABLE endpoints
    ADD COLUMN batch_max_size integer NOT NULL DEFAULT 32
        CHECK (batch_max_size >= 1 AND batch_max_size <= 1024),
    ADD COLUMN batch_max_queue_delay_us integer NOT NULL DEFAULT 500
        CHECK (batch_max_queue_delay_us >= 0 AND batch_max_queue_delay_us <= 1000000),
    ADD COLUMN batch_preferred_sizes integer[] NOT NULL DEFAULT '{}'
        CHECK (cardinality(batch_preferred_sizes) <= 16),
    ADD COLUMN batch_queue_timeout_ms integer NOT NULL DEFAULT 1000
        CHECK (batch_queue_timeout_ms >= 1 AND batch_queue_timeout_ms <= 60000);
