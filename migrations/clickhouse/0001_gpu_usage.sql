CREATE TABLE IF NOT EXISTS gpu_usage (
    ts                 DateTime,
    node               String,
    gpu                UInt16,
    slice              UInt16,
    gpu_type           String,
    profile            String,
    team               String,
    endpoint           String,
    model              String,
    version            String,
    replica            String,
    util_pct           Float32,
    memory_mb          UInt64,
    requests           UInt64,
    rate_uusd_per_hour UInt64,
    batch_id           String,
    row_idx            UInt32
) ENGINE = MergeTree() PARTITION BY toDate(ts) ORDER BY (node, ts, gpu, slice)
