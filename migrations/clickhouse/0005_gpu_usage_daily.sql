-- Sealed days of the hourly rollup, for month-long reports (package
-- chargeback, docs/chargeback.md). Nothing feeds this table on insert: the
-- chargeback sealer rebuilds a day from gpu_usage_hourly once the day is
-- older than the usage stream's retention, and records the day's sums in
-- gpu_usage_sealed_days. Reports read a day from here only while its rows
-- add up to its seal; otherwise they read the hourly rollup.
CREATE TABLE IF NOT EXISTS gpu_usage_daily (
    day             Date,
    team            String,
    endpoint        String,
    model           String,
    version         String,
    gpu_type        String,
    profile         String,
    gpu_seconds     UInt64,
    cost_uusd_x3600 UInt64,
    requests        UInt64,
    util_pct_sum    Float64,
    memory_mb_sum   UInt64
) ENGINE = SummingMergeTree() PARTITION BY day ORDER BY (day, team, endpoint, model, version, gpu_type, profile);

CREATE TABLE IF NOT EXISTS gpu_usage_sealed_days (
    day             Date,
    gpu_seconds     UInt64,
    cost_uusd_x3600 UInt64,
    sealed_at       DateTime
) ENGINE = MergeTree() PARTITION BY toYYYYMM(day) ORDER BY (day, sealed_at)
