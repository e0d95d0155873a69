-- The request explorer (docs/operations.md): the gateway's overhead
-- histogram beside latency, and each window's notable requests as
-- parallel arrays in the same row, so they are stored exactly once with it.
ALTER TABLE request_stats
    ADD COLUMN overhead_buckets Array(UInt64),
    ADD COLUMN overhead_sum_ms Float64 DEFAULT 0,
    ADD COLUMN notable_kind Array(String),
    ADD COLUMN notable_request_id Array(String),
    ADD COLUMN notable_trace_id Array(String),
    ADD COLUMN notable_replica Array(String),
    ADD COLUMN notable_status Array(UInt16),
    ADD COLUMN notable_end_ms Array(Int64),
    ADD COLUMN notable_latency_ms Array(Float64),
    ADD COLUMN notable_upstream_ms Array(Float64)
