package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"path/filepath"
	"sort"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/jackc/pgx/v5/pgxpool"

	"modelplane/app"
	"modelplane/auth"
	"modelplane/busapi"
	"modelplane/chargeback"
	"modelplane/controlplane"
	"modelplane/db"
	"modelplane/drift"
	"modelplane/reqstats"
	"modelplane/tenant"
)

// PagesResult is what `modelplane bench pages` prints: every page and API
// route that reads ClickHouse, at p50 and p99 under the clients, before
// (raw reads, no cache: what the readers did before ClickHouse migration
// 0013) and after (pre-aggregates and caches), each phase with the trivial
// route measured beside it through the same middleware.
type PagesResult struct {
	Name string `json:"name"`
	// Before and After are each route's latency in the phase, the
	// baseline route (GET /api/v1/me) among them.
	Before        map[string]routeLatency `json:"before"`
	After         map[string]routeLatency `json:"after"`
	BaselineRoute string                  `json:"baseline_route"`
	// AfterVsBeforeP99 is each ClickHouse-backed route's p99 after over
	// its p99 before; AfterVsBaselineP99 its p99 after over the baseline's
	// p99 in the same phase.
	AfterVsBeforeP99   map[string]float64 `json:"after_vs_before_p99"`
	AfterVsBaselineP99 map[string]float64 `json:"after_vs_baseline_p99"`
	// SlowestAfter is the ClickHouse-backed route with the highest p99
	// after, and SlowestAfterVsBaselineP99 its ratio.
	SlowestAfter              string  `json:"slowest_after"`
	SlowestAfterVsBaselineP99 float64 `json:"slowest_after_vs_baseline_p99"`
	// MedianRouteP99Ms is the median of the ClickHouse-backed routes'
	// p99s after, and SlowestVsMedianP99 the slowest one's p99 over it
	// (issue 31: at most 3; the summary table checks it).
	MedianRouteP99Ms   float64 `json:"median_route_p99_ms"`
	SlowestVsMedianP99 float64 `json:"slowest_route_p99_vs_median"`
	Errors             int     `json:"errors"`
	// Failures counts, per phase and route, the answers that were not
	// 200, by status ("error": no answer within a minute).
	Failures map[string]map[string]map[string]int `json:"failures,omitempty"`

	Endpoints         int     `json:"endpoints"`
	Days              int     `json:"days"`
	RequestStatsRows  uint64  `json:"request_stats_rows"`
	MinutelyRows      uint64  `json:"request_stats_minutely_rows"`
	HourlyStatsRows   uint64  `json:"request_stats_hourly_rows"`
	UsageHourlyRows   uint64  `json:"gpu_usage_hourly_rows"`
	UsageRawRows      uint64  `json:"gpu_usage_rows"`
	SealedDays        uint64  `json:"sealed_days"` // older than chargeback.SealAfter, as a control plane seals them
	PredictionSamples uint64  `json:"prediction_samples"`
	LoadSeconds       float64 `json:"load_seconds"`
	// LoadSecondsBy is each part of the load, and MergeWaitSeconds the
	// wait for ClickHouse's background merges to end before measuring.
	LoadSecondsBy      map[string]float64 `json:"load_seconds_by"`
	MergeWaitSeconds   float64            `json:"merge_wait_seconds"`
	Clients            int                `json:"clients"`
	SecondsPerPhase    float64            `json:"seconds_per_phase"`
	HotEndpoints       int                `json:"hot_endpoints"`
	StatsWindowSeconds int                `json:"hot_window_seconds"`
}

// The loaded history: 30 days of every endpoint's statistics (both
// versions, one window an hour) and hourly usage; for the hot
// endpoints (one per team, the ones the clients poll) the last two hours
// as four gateways publish them (a window per version every 5 s, with
// notable requests) and a week of prediction samples. The raw usage of
// the current hour is per second for every endpoint.
const (
	pagesDays          = 30
	pagesColdEvery     = time.Hour
	pagesHotHours      = 2
	pagesHotGateways   = 4
	pagesHotEvery      = 5 * time.Second
	pagesSamplesPerHot = 20_000
	// pagesWarmup is not measured: each phase's first reads (the after
	// phase's caches filling) and connections.
	pagesWarmup = 15 * time.Second
)

func runPages(ctx context.Context, cfg Config, out io.Writer) error {
	res, err := measurePages(ctx, cfg)
	if err != nil {
		return err
	}
	keys := make([]string, 0, len(res.AfterVsBeforeP99))
	for k := range res.AfterVsBeforeP99 {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	line := fmt.Sprintf("pages: %d endpoints, %d days, %d request_stats rows (load %.0f s); baseline p99 before %.2f ms, after %.2f ms; slowest after %s, %.2fx the median route's p99 %.2f ms; %d errors\n",
		res.Endpoints, res.Days, res.RequestStatsRows, res.LoadSeconds, res.Before[apiBaseline].P99Ms, res.After[apiBaseline].P99Ms,
		res.SlowestAfter, res.SlowestVsMedianP99, res.MedianRouteP99Ms, res.Errors)
	for _, k := range keys {
		b, a := res.Before[k], res.After[k]
		line += fmt.Sprintf("  %-34s p50 %8.2f -> %8.2f ms  p99 %8.2f -> %8.2f ms  (%.2fx the baseline's p99 after)\n",
			k, b.P50Ms, a.P50Ms, b.P99Ms, a.P99Ms, res.AfterVsBaselineP99[k])
	}
	return emit(out, cfg.JSON, res, "%s", line)
}

// measurePages loads the history into a private ClickHouse beside the API
// benchmark's catalogue, then drives the ClickHouse-backed routes with the
// clients against a control plane reading raw rows without caches, then
// against one reading the pre-aggregates through its caches.
func measurePages(ctx context.Context, cfg Config) (PagesResult, error) {
	res := PagesResult{Name: "pages", BaselineRoute: apiBaseline, Endpoints: apiEndpoints, Days: pagesDays, Clients: cfg.Clients,
		HotEndpoints: apiTeams, StatsWindowSeconds: int(pagesHotEvery / time.Second)}
	s, err := newScratch("modelplane-pages-")
	if err != nil {
		return res, err
	}
	defer s.close()
	pool, err := s.postgres(ctx)
	if err != nil {
		return res, err
	}
	// Endpoints created before the history, so drift reads it.
	if _, err := pool.Exec(ctx, apiSeed+`UPDATE endpoints SET created_at = now() - interval '60 days';`); err != nil {
		return res, fmt.Errorf("seed: %w", err)
	}
	ch, err := s.clickhouse(ctx)
	if err != nil {
		return res, err
	}
	now := time.Now().UTC().Truncate(time.Second)
	t0 := time.Now()
	if res.LoadSecondsBy, err = loadPages(ctx, pool, ch, now); err != nil {
		return res, err
	}
	res.LoadSeconds = time.Since(t0).Seconds()
	t0 = time.Now()
	if err := waitMerges(ctx, ch); err != nil {
		return res, err
	}
	res.MergeWaitSeconds = time.Since(t0).Seconds()
	for _, c := range []struct {
		q    string
		into *uint64
	}{
		{"SELECT count() FROM request_stats", &res.RequestStatsRows},
		{"SELECT count() FROM request_stats_minutely", &res.MinutelyRows},
		{"SELECT count() FROM request_stats_hourly", &res.HourlyStatsRows},
		{"SELECT count() FROM gpu_usage_hourly", &res.UsageHourlyRows},
		{"SELECT count() FROM gpu_usage", &res.UsageRawRows},
		{"SELECT uniqExact(day) FROM gpu_usage_sealed_days", &res.SealedDays},
		{"SELECT count() FROM prediction_samples", &res.PredictionSamples},
	} {
		if err := ch.QueryRow(ctx, c.q).Scan(c.into); err != nil {
			return res, fmt.Errorf("count: %w", err)
		}
	}

	// One control plane serves both phases: the before phase swaps its
	// readers for raw ones without caches (the handlers hold the
	// control plane's services by pointer), the after phase puts its own
	// back.
	cp, err := controlplane.New(controlplane.Stores{Pool: pool, CH: ch}, controlplane.Config{Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		ArtifactDir: filepath.Join(s.dir, "artifacts"), MaxUploadBytes: 1 << 30,
		Sessions: auth.SessionConfig{IdleTimeout: time.Hour, AbsoluteTimeout: time.Hour}})
	if err != nil {
		return res, err
	}
	h := app.NewHTTP(cp, app.HTTPOptions{MaxUploadBytes: 1 << 30})
	creds, err := pagesCreds(ctx, h.Tenant, h.Sessions)
	if err != nil {
		return res, err
	}
	addr, err := s.serve(h.Handler())
	if err != nil {
		return res, err
	}
	traffic, drifts, costs := cp.Traffic, cp.Drift, cp.Chargeback
	var phases [2]map[string][]time.Duration
	for i := range phases {
		if i == 0 {
			cp.Traffic = reqstats.NewReader(ch, nil).RawOnly()
			cp.Drift = drift.NewService(pool, drift.NewReader(ch, drift.ReaderConfig{}), nil)
			cp.Chargeback = chargeback.New(ch, db.New(pool), nil).RawStatistics()
		} else {
			cp.Traffic, cp.Drift, cp.Chargeback = traffic, drifts, costs
		}
		if i == 1 {
			// --cpuprofile: the after phase, warm-up included.
			if err := s.profile(cfg.Profile); err != nil {
				return res, err
			}
		}
		start := time.Now().Add(pagesWarmup)
		load := apiLoad{ctx: ctx, base: "http://" + addr, creds: creds, start: start, deadline: start.Add(cfg.Duration),
			byKind: map[string][]time.Duration{}, targets: pageTargets, perTeam: 1, stagger: true, timeout: time.Minute}
		load.run(cfg.Clients)
		res.SecondsPerPhase = time.Since(start).Seconds()
		phases[i] = load.byKind
		res.Errors += load.errs
		if len(load.statuses) > 0 {
			if res.Failures == nil {
				res.Failures = map[string]map[string]map[string]int{}
			}
			res.Failures[[]string{"before", "after"}[i]] = load.statuses
		}
	}
	res.Before, res.After = latencies(phases[0]), latencies(phases[1])
	res.AfterVsBeforeP99, res.AfterVsBaselineP99 = map[string]float64{}, map[string]float64{}
	base := res.After[apiBaseline].P99Ms
	for k, a := range res.After {
		if k == apiBaseline {
			continue
		}
		if b := res.Before[k].P99Ms; b > 0 {
			res.AfterVsBeforeP99[k] = round3(a.P99Ms / b)
		}
		if base > 0 {
			res.AfterVsBaselineP99[k] = round3(a.P99Ms / base)
		}
		if res.SlowestAfter == "" || a.P99Ms > res.After[res.SlowestAfter].P99Ms {
			res.SlowestAfter = k
		}
	}
	if res.SlowestAfter == "" {
		return res, errors.New("pages: no request measured")
	}
	res.SlowestAfterVsBaselineP99 = res.AfterVsBaselineP99[res.SlowestAfter]
	var p99s []float64
	for k, a := range res.After {
		if k != apiBaseline {
			p99s = append(p99s, a.P99Ms)
		}
	}
	res.MedianRouteP99Ms = median(p99s)
	if res.MedianRouteP99Ms > 0 {
		res.SlowestVsMedianP99 = round3(res.After[res.SlowestAfter].P99Ms / res.MedianRouteP99Ms)
	}
	return res, nil
}

// latencies is each kind's p50 and p99.
func latencies(byKind map[string][]time.Duration) map[string]routeLatency {
	out := map[string]routeLatency{}
	for k, v := range byKind {
		out[k] = routeLatency{P50Ms: percentile(v, 0.50), P99Ms: percentile(v, 0.99), Requests: len(v)}
	}
	return out
}

// pagesCreds makes every team's API key and its admin's session; both
// control planes share the PostgreSQL they live in.
func pagesCreds(ctx context.Context, keys *tenant.Service, sessions *auth.Sessions) (apiCreds, error) {
	creds := apiCreds{keys: make([]string, apiTeams), cookies: make([]string, apiTeams)}
	for i := range apiTeams {
		raw, _, err := keys.CreateKey(ctx, auth.System("bench"), tenant.KeyRequest{Name: "bench", Team: fmt.Sprintf("team-%d", i+1), Role: auth.RoleViewer})
		if err != nil {
			return creds, err
		}
		creds.keys[i] = raw
		tok, _, err := sessions.Create(ctx, int64(i+1))
		if err != nil {
			return creds, err
		}
		creds.cookies[i] = tok
	}
	return creds, nil
}

// pageTargets are the ClickHouse-backed requests for endpoint model of the
// client's team, and the baseline: the traffic charts (six hours in minute
// steps; ten minutes in 10-second steps, raw both ways), the explorer, the
// drift report, the endpoint page (charts and explorer), this month's
// chargeback by endpoint and version (tokens) and by caller team, the
// chargeback portal page, and what a rollout page's canary cost reads (the
// endpoint's versions since a start inside an hour, up to now).
func pageTargets(model int) []apiTarget {
	ep := fmt.Sprintf("endpoint-%d", model)
	now := time.Now().UTC()
	month := url.Values{"from": {now.AddDate(0, 0, -pagesDays).Truncate(24 * time.Hour).Format(time.RFC3339)},
		"to": {now.Truncate(24 * time.Hour).Format(time.RFC3339)}}
	byVersion, byCaller := url.Values{}, url.Values{}
	for k, v := range month {
		byVersion[k], byCaller[k] = v, v
	}
	byVersion.Set("group_by", "team,endpoint,version")
	byCaller.Set("group_by", "endpoint,caller_team")
	canary := url.Values{"from": {now.Add(-5*time.Hour - 30*time.Minute - 17*time.Second).Format(time.RFC3339)},
		"to": {now.Format(time.RFC3339)}, "group_by": {"version"}, "endpoint": {ep}}
	return []apiTarget{
		{apiBaseline, "/api/v1/me", false},
		{"api stats 6h", "/api/v1/endpoints/" + ep + "/stats?minutes=360", false},
		{"api stats 10m", "/api/v1/endpoints/" + ep + "/stats?minutes=10", false},
		{"api explorer 60m", "/api/v1/endpoints/" + ep + "/requests?minutes=60", false},
		{"api drift", "/api/v1/endpoints/" + ep + "/drift", false},
		{"portal endpoint", "/endpoints/" + ep, true},
		{"api chargeback month by version", "/api/v1/chargeback?" + byVersion.Encode(), false},
		{"api chargeback month by caller", "/api/v1/chargeback?" + byCaller.Encode(), false},
		{"api chargeback canary", "/api/v1/chargeback?" + canary.Encode(), false},
		{"portal chargeback", "/chargeback", true},
	}
}

// loadPages writes the history ending at now (see the constants), all of
// it generated inside ClickHouse (INSERT … SELECT over numbers) so the
// load is bounded by ClickHouse, not the client. Endpoint i is
// endpoint-i of team-(1+i%50), with its PostgreSQL id; its versions are
// v9 and v10.
func loadPages(ctx context.Context, pool *pgxpool.Pool, ch driver.Conn, now time.Time) (map[string]float64, error) {
	var offset, spread int64
	if err := pool.QueryRow(ctx, `SELECT min(e.id - m.id), max(e.id - m.id) - min(e.id - m.id) FROM endpoints e JOIN models m ON m.id = e.model_id`).Scan(&offset, &spread); err != nil {
		return nil, fmt.Errorf("endpoint ids: %w", err)
	}
	if spread != 0 {
		return nil, errors.New("pages: endpoint ids do not follow model ids")
	}
	from := now.AddDate(0, 0, -pagesDays).Truncate(time.Hour)
	hour := now.Truncate(time.Hour)
	hotFrom := now.Add(-pagesHotHours * time.Hour)
	buckets := busapi.LatencyBuckets
	coldSlots := int64(now.Sub(from) / pagesColdEvery)
	hotSlots := int64(pagesHotHours * time.Hour / pagesHotEvery)
	sampleEvery := 7 * 24 * time.Hour / pagesSamplesPerHot
	// Each part is written in chunks of at most chunk slots (a slot is
	// every row of one time step), so no INSERT runs long enough to hit
	// the connection's read timeout on a loaded machine; q takes the
	// chunk's first time, then its other arguments, then its row count.
	stmts := []struct {
		what         string
		q            string
		first        time.Time
		step         time.Duration
		slots, chunk int64
		perSlot      int64
		args         []any
	}{
		{"cold request statistics", fmt.Sprintf(`INSERT INTO request_stats (window_start, window_start_ms, window_end, window_end_ms, gateway,
			endpoint, endpoint_id, team, version, requests, errors_upstream, latency_buckets, streams, ttft_buckets, tpot_buckets, tokens,
			msg_id, stream_seq, overhead_buckets, caller_team)
			SELECT toDateTime(? + intDiv(number, %[1]d) * %[2]d) AS ws, toUInt16(number %% 1000), ws + 5, toUInt16(0), 'gw-1',
				concat('endpoint-', toString(e)), toInt64(e + ?), concat('team-', toString(1 + e %% 50)), if(number %% 2 = 0, 'v10', 'v9'),
				toUInt64(100 + number %% 900) AS n, toUInt64(number %% 7), arrayMap(i -> if(i = 20 + number %% 40, n, toUInt64(0)), range(%[3]d)),
				toUInt64(0), emptyArrayUInt64(), emptyArrayUInt64(), toUInt64(number %% 5000), concat('c', toString(number)), number,
				arrayMap(i -> if(i = number %% 8, n, toUInt64(0)), range(%[3]d)), if(number %% 5 = 0, concat('team-', toString(1 + (e + 1) %% 50)), '')
			FROM (SELECT number, 1 + intDiv(number, 2) %% %[4]d AS e FROM numbers(?))`,
			apiEndpoints*2, int(pagesColdEvery/time.Second), buckets, apiEndpoints), from, pagesColdEvery, coldSlots, 48, apiEndpoints * 2, []any{offset}},
		{"hot request statistics", fmt.Sprintf(`INSERT INTO request_stats (window_start, window_start_ms, window_end, window_end_ms, gateway,
			endpoint, endpoint_id, team, version, requests, errors_upstream, latency_buckets, streams, ttft_buckets, tpot_buckets, tokens,
			msg_id, stream_seq, overhead_buckets, notable_kind, notable_request_id, notable_trace_id, notable_replica, notable_status,
			notable_end_ms, notable_latency_ms, notable_upstream_ms)
			SELECT toDateTime(? + intDiv(number, %[1]d) * %[2]d) AS ws, toUInt16(0), ws + 5, toUInt16(0), concat('gw-', toString(g)),
				concat('endpoint-', toString(e)), toInt64(e + ?), concat('team-', toString(1 + e %% 50)), if(number %% 2 = 0, 'v10', 'v9'),
				toUInt64(20 + number %% 80) AS n, toUInt64(number %% 3), arrayMap(i -> if(i = 20 + number %% 40, n, toUInt64(0)), range(%[3]d)),
				toUInt64(0), emptyArrayUInt64(), emptyArrayUInt64(), toUInt64(number %% 500), concat('h', toString(number)), number,
				arrayMap(i -> if(i = number %% 8, n, toUInt64(0)), range(%[3]d)),
				if(number %% 20 = 0, ['slowest', 'failed'], ['slowest']) AS kinds, arrayMap(k -> concat(k, toString(number)), kinds),
				arrayMap(k -> concat('t', toString(number)), kinds), arrayMap(k -> 'r-0', kinds), arrayMap(k -> if(k = 'failed', toUInt16(503), toUInt16(200)), kinds),
				arrayMap(k -> toInt64(toUnixTimestamp(ws)) * 1000 + 4000, kinds), arrayMap(k -> toFloat64(number %% 900), kinds), arrayMap(k -> toFloat64(number %% 800), kinds)
			FROM (SELECT number, 1 + intDiv(number, 2) %% %[4]d AS e, intDiv(number, %[4]d * 2) %% %[5]d AS g FROM numbers(?))`,
			apiTeams*2*pagesHotGateways, int(pagesHotEvery/time.Second), buckets, apiTeams, pagesHotGateways), hotFrom, pagesHotEvery, hotSlots, 360, apiTeams * 2 * pagesHotGateways, []any{offset}},
		{"hourly usage", fmt.Sprintf(`INSERT INTO gpu_usage_hourly (hour, team, endpoint, model, version, replica, gpu_type, profile,
			gpu_seconds, cost_uusd_x3600, requests, util_pct_sum, memory_mb_sum)
			SELECT toDateTime(? + intDiv(number, %[1]d) * 3600), concat('team-', toString(1 + e %% 50)), concat('endpoint-', toString(e)),
				concat('model-', toString(e)), 'v10', concat('endpoint-', toString(e), '-v10-0'), 'A100-80GB', 'mig-1g.10gb',
				toUInt64(3600), toUInt64(3600 * 500003), toUInt64(3600 * 5), toFloat64(3600 * 40), toUInt64(3600 * 5000)
			FROM (SELECT number, 1 + number %% %[1]d AS e FROM numbers(?))`, apiEndpoints),
			from, time.Hour, int64(hour.Sub(from) / time.Hour), 168, apiEndpoints, nil},
		{"raw usage of this hour", fmt.Sprintf(`INSERT INTO gpu_usage (ts, node, gpu, slice, gpu_type, profile, team, endpoint, model, version,
			replica, util_pct, memory_mb, requests, rate_uusd_per_hour, batch_id, row_idx)
			SELECT toDateTime(? + intDiv(number, %[1]d)), concat('node-', toString(intDiv(e, 8))), toUInt16(e %% 8), toUInt16(1), 'A100-80GB',
				'mig-1g.10gb', concat('team-', toString(1 + e %% 50)), concat('endpoint-', toString(e)), concat('model-', toString(e)), 'v10',
				concat('endpoint-', toString(e), '-v10-0'), toFloat32(40), toUInt64(5000), toUInt64(5), toUInt64(500003), 'bench', toUInt32(number)
			FROM (SELECT number, 1 + number %% %[1]d AS e FROM numbers(?))`, apiEndpoints),
			hour, time.Second, int64(now.Sub(hour) / time.Second), 300, apiEndpoints, nil},
		{"prediction samples", fmt.Sprintf(`INSERT INTO prediction_samples (ts, ts_ms, endpoint, endpoint_id, team, version, request_id, instance,
			feature_names, feature_values, feature_strings, score, label, tokens, latency_ms)
			SELECT toDateTime(? + intDiv(number, %[1]d) * %[2]d) AS ts, toUInt16(0), concat('endpoint-', toString(e)), toInt64(e + ?),
				concat('team-', toString(1 + e %% 50)), if(number %% 10 = 0, 'v9', 'v10'), concat('s', toString(number)), toUInt32(0),
				['a', 'b', 'c'], [toFloat64(number %% 97), toFloat64(number %% 13) * 1.5, toFloat64(intDiv(number, 7) %% 31)], emptyArrayString(),
				(number %% 1000) / 1000, if(number %% 3 = 0, 'fraud', 'ok'), toUInt32(0), toFloat64(number %% 50)
			FROM (SELECT number, 1 + number %% %[1]d AS e FROM numbers(?))`, apiTeams, int(sampleEvery/time.Second)),
			now.Add(-7 * 24 * time.Hour), sampleEvery, pagesSamplesPerHot, 4000, apiTeams, []any{offset}},
	}
	took := map[string]float64{}
	for _, st := range stmts {
		t0 := time.Now()
		for s0 := int64(0); s0 < st.slots; s0 += st.chunk {
			n := min(st.chunk, st.slots-s0)
			args := append(append([]any{st.first.Add(time.Duration(s0) * st.step).Unix()}, st.args...), n*st.perSlot)
			if err := ch.Exec(ctx, st.q, args...); err != nil {
				return nil, fmt.Errorf("load %s: %w", st.what, err)
			}
		}
		took[st.what] = round3(time.Since(t0).Seconds())
	}
	// The control plane's sealer rolls each day older than
	// chargeback.SealAfter into gpu_usage_daily; the history's closed days
	// are sealed as a running platform's would be, so the chargeback
	// routes read what they read in production.
	t0 := time.Now()
	if _, err := chargeback.NewSealer(ch, nil, nil).Seal(ctx); err != nil {
		return nil, fmt.Errorf("seal: %w", err)
	}
	took["sealed days"] = round3(time.Since(t0).Seconds())
	return took, nil
}

// waitMerges waits until ClickHouse merges no part (at most ten minutes), so
// the phases measure reads of a table at rest, not beside the load's
// merges.
func waitMerges(ctx context.Context, ch driver.Conn) error {
	deadline := time.Now().Add(10 * time.Minute)
	for {
		var n uint64
		if err := ch.QueryRow(ctx, "SELECT count() FROM system.merges").Scan(&n); err != nil {
			return fmt.Errorf("merges: %w", err)
		}
		if n == 0 || time.Now().After(deadline) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}
