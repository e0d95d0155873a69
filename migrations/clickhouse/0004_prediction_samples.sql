CREATE TABLE IF NOT EXISTS prediction_samples (
    ts               DateTime,
    ts_ms            UInt16,
    endpoint         String,
    team             String,
    version          String,
    request_id       String,
    instance         UInt32,
    feature_names    Array(String),
    feature_values   Array(Float64),
    feature_strings  Array(String),
    score            Float64,
    label            String,
    tokens           UInt32,
    latency_ms       Float64,
    stream_seq       UInt64
) ENGINE = MergeTree() PARTITION BY toDate(ts) ORDER BY (endpoint, version, ts)
