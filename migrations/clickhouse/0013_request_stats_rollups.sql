-- Pre-aggregates of request_stats, so the pages that chart or bill request
-- statistics never scan raw windows (docs/clickhouse.md). Both are fed on
-- insert by a materialized view and keyed by what their readers group by;
-- a window belongs to the minute and hour its window_start falls in, as
-- the raw reads attribute it. ingest stores each MP_REQSTATS message once
-- (it skips ids request_stats already holds before it inserts), so each
-- view sees each window once.
--
-- request_stats_minutely: one row per endpoint, endpoint id, version,
-- pinned flag and minute, with the histograms summed bucket by bucket
-- (sumForEach): the traffic charts beyond ten minutes and the rollout
-- judge's whole minutes.
CREATE TABLE IF NOT EXISTS request_stats_minutely (
    minute           DateTime,
    endpoint         String,
    endpoint_id      Int64,
    version          String,
    pinned           UInt8,
    requests         AggregateFunction(sum, UInt64),
    errors           AggregateFunction(sum, UInt64),
    streams          AggregateFunction(sum, UInt64),
    latency_buckets  AggregateFunction(sumForEach, Array(UInt64)),
    ttft_buckets     AggregateFunction(sumForEach, Array(UInt64)),
    tpot_buckets     AggregateFunction(sumForEach, Array(UInt64))
) ENGINE = AggregatingMergeTree() PARTITION BY toDate(minute) ORDER BY (endpoint, endpoint_id, version, pinned, minute);

-- request_stats_hourly: requests and tokens per hour of every endpoint
-- version by owning team, caller team and graph: chargeback's tokens and
-- its split among caller teams and graphs, and predictive autoscaling's
-- hourly rates.
CREATE TABLE IF NOT EXISTS request_stats_hourly (
    hour              DateTime,
    endpoint          String,
    endpoint_id       Int64,
    team              String,
    version           String,
    caller_team       String,
    via_graph         String,
    via_graph_version String,
    requests          UInt64,
    tokens            UInt64
) ENGINE = SummingMergeTree() PARTITION BY toYYYYMM(hour)
ORDER BY (endpoint, endpoint_id, team, hour, version, caller_team, via_graph, via_graph_version);

CREATE MATERIALIZED VIEW IF NOT EXISTS request_stats_minutely_mv TO request_stats_minutely AS SELECT
    toStartOfMinute(window_start) AS minute, endpoint, endpoint_id, version, pinned,
    sumState(requests) AS requests,
    sumState(errors_upstream + errors_timeout + errors_shed) AS errors,
    sumState(streams) AS streams,
    sumForEachState(latency_buckets) AS latency_buckets,
    sumForEachState(ttft_buckets) AS ttft_buckets,
    sumForEachState(tpot_buckets) AS tpot_buckets
FROM request_stats
GROUP BY minute, endpoint, endpoint_id, version, pinned;

CREATE MATERIALIZED VIEW IF NOT EXISTS request_stats_hourly_mv TO request_stats_hourly AS SELECT
    toStartOfHour(window_start) AS hour, endpoint, endpoint_id, team, version, caller_team, via_graph, via_graph_version,
    sum(requests) AS requests, sum(tokens) AS tokens
FROM request_stats
GROUP BY hour, endpoint, endpoint_id, team, version, caller_team, via_graph, via_graph_version;

-- The backfill: every window stored before the views existed. It runs once,
-- when this migration is applied, which the control plane does before it
-- starts ingest (docs/operations.md: apply it with `modelplane migrate`
-- while no control plane of the previous release ingests).
INSERT INTO request_stats_minutely (minute, endpoint, endpoint_id, version, pinned, requests, errors, streams, latency_buckets, ttft_buckets, tpot_buckets)
SELECT toStartOfMinute(window_start) AS minute, endpoint, endpoint_id, version, pinned,
    sumState(requests), sumState(errors_upstream + errors_timeout + errors_shed), sumState(streams),
    sumForEachState(latency_buckets), sumForEachState(ttft_buckets), sumForEachState(tpot_buckets)
FROM request_stats
GROUP BY minute, endpoint, endpoint_id, version, pinned;

INSERT INTO request_stats_hourly (hour, endpoint, endpoint_id, team, version, caller_team, via_graph, via_graph_version, requests, tokens)
SELECT toStartOfHour(window_start) AS hour, endpoint, endpoint_id, team, version, caller_team, via_graph, via_graph_version,
    sum(requests), sum(tokens)
FROM request_stats
GROUP BY hour, endpoint, endpoint_id, team, version, caller_team, via_graph, via_graph_version
