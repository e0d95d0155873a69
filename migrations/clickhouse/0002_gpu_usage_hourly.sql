CREATE MATERIALIZED VIEW IF NOT EXISTS gpu_usage_hourly
ENGINE = SummingMergeTree() PARTITION BY toYYYYMM(hour)
ORDER BY (hour, team, endpoint, model, version, replica, gpu_type, profile)
AS SELECT
    toStartOfHour(ts) AS hour, team, endpoint, model, version, replica, gpu_type, profile,
    count() AS gpu_seconds,
    sum(rate_uusd_per_hour) AS cost_uusd_x3600,
    sum(requests) AS requests,
    sum(util_pct) AS util_pct_sum,
    sum(memory_mb) AS memory_mb_sum
FROM gpu_usage
GROUP BY hour, team, endpoint, model, version, replica, gpu_type, profile
