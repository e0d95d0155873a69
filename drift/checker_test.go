package drift_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/coder/quartz"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"modelplane/auth"
	"modelplane/busapi"
	"modelplane/db"
	"modelplane/drift"
	"modelplane/drift/stat"
	"modelplane/field"
	"modelplane/internal/chtest"
	"modelplane/internal/eventtest"
	"modelplane/internal/pgtest"
	"modelplane/internal/wait"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// seed makes team risk with a classification model and, per endpoint, its
// routing: v23 at 95 percent, v24 at 5. It returns the team id.
func seed(t *testing.T, pool *pgxpool.Pool, endpoints ...string) int64 {
	t.Helper()
	ctx := context.Background()
	var team int64
	if err := pool.QueryRow(ctx, `INSERT INTO teams (name) VALUES ('risk') RETURNING id`).Scan(&team); err != nil {
		t.Fatal(err)
	}
	for _, e := range endpoints {
		var model int64
		if err := pool.QueryRow(ctx, `INSERT INTO models (team_id, name, task, feature_names) VALUES ($1, $2, 'classification', '{amount,age}') RETURNING id`,
			team, "model-"+e).Scan(&model); err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, `INSERT INTO model_versions (model_id, team_id, name, format, runtime, artifact_uri, manifest, size_bytes)
			SELECT $1::bigint, $2, v, 'onnx', 'onnxruntime', 'sha256-manifest:' || md5($1::bigint::text || v), '{}', 1 FROM unnest(ARRAY['v23','v24']) v`, model, team); err != nil {
			t.Fatal(err)
		}
		var id int64
		// Created long before the samples the tests write (drift reads
		// no sample from before its endpoint existed).
		if err := pool.QueryRow(ctx, `INSERT INTO endpoints (team_id, name, model_id, runtime, instance_profile, min_replicas, max_replicas, tier, created_at)
			VALUES ($1, $2, $3, 'onnxruntime', 'mig-1g.10gb', 1, 2, 'standard', '2026-01-01T00:00:00Z') RETURNING id`, team, e, model).Scan(&id); err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, `INSERT INTO routing_rules (endpoint_id, version_id, weight)
			SELECT $1, v.id, CASE v.name WHEN 'v23' THEN 95 ELSE 5 END FROM model_versions v WHERE v.model_id = $2`, id, model); err != nil {
			t.Fatal(err)
		}
	}
	return team
}

// endpointID is the id of the endpoint named name.
func endpointID(t *testing.T, pool *pgxpool.Pool, name string) int64 {
	t.Helper()
	var id int64
	if err := pool.QueryRow(context.Background(), "SELECT id FROM endpoints WHERE name = $1", name).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

// garbage fills endpoint's windows as of t0: v23 scores mostly low over
// the week before, v23 and v24 in the last 40 minutes, v24 near-uniformly
// (the seed documents' "model returns garbage"); curN samples each.
func garbage(t *testing.T, ch driver.Conn, endpoint string, id int64, t0 time.Time, curN int) {
	const refN = 3000
	insertID(t, ch, endpoint, id, rows("v23", t0.Add(-6*24*time.Hour), 5*24*time.Hour, normal(refN, 100, 20, 1), normal(refN, 40, 10, 2), normal(refN, 0.12, 0.18, 3)))
	insertID(t, ch, endpoint, id, rows("v23", t0.Add(-40*time.Minute), 40*time.Minute, normal(curN, 100, 20, 4), normal(curN, 40, 10, 5), normal(curN, 0.12, 0.18, 6)))
	insertID(t, ch, endpoint, id, rows("v24", t0.Add(-40*time.Minute), 40*time.Minute, normal(curN, 100, 20, 7), normal(curN, 40, 10, 8), normal(curN, 0.49, 0.28, 9)))
}

func TestCheckerAlertsAfterTheDurationOnce(t *testing.T) {
	t.Parallel()
	pool, ch := pgtest.New(t), chtest.New(t)
	ctx := context.Background()
	seed(t, pool, "fraud", "quiet")
	t0 := time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC)
	garbage(t, ch, "fraud", endpointID(t, pool, "fraud"), t0, 1000)
	garbage(t, ch, "quiet", endpointID(t, pool, "quiet"), t0, 50) // too few current samples to judge

	events := eventtest.New(t, pool, busapi.EventsSubject("risk"))
	clk := quartz.NewMock(t)
	clk.Set(t0)
	reg := prometheus.NewRegistry()
	c, err := drift.NewChecker(pool, drift.NewReader(ch, drift.ReaderConfig{}), nil, quiet, clk, reg,
		drift.CheckerConfig{AlertAfter: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	var fired busapi.Event
	for _, step := range []time.Duration{0, 5 * time.Minute, 10 * time.Minute, 15 * time.Minute} {
		clk.Set(t0.Add(step))
		if err := c.Check(ctx); err != nil {
			t.Fatalf("check at +%s: %v", step, err)
		}
		evs := events.Next(t)
		switch {
		case step < 10*time.Minute && len(evs) != 0:
			t.Fatalf("at +%s: events %+v before the alert duration", step, evs)
		case step == 10*time.Minute && len(evs) != 1:
			t.Fatalf("at +%s: events %+v, want 1", step, evs)
		case step > 10*time.Minute && len(evs) != 0:
			t.Fatalf("at +%s: events %+v, want the alert only once", step, evs)
		}
		if len(evs) == 1 {
			fired = evs[0]
		}
	}
	if e := fired; e.Kind != drift.EventKind || e.Type != "alert" || e.Name != "fraud" || e.State != "v24 "+stat.MetricW1 ||
		!strings.Contains(e.Message, "since "+t0.Format(time.RFC3339)) || !e.At.Equal(t0.Add(10*time.Minute)) {
		t.Errorf("event = %+v, want the w1 alert of fraud v24 breached since %s", e, t0)
	}
	var e drift.Event
	var after []byte
	if err := pool.QueryRow(ctx, `SELECT after FROM audit_log WHERE action = 'drift.alert' AND object_name = 'fraud'`).Scan(&after); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(after, &e); err != nil || e.Value <= stat.W1Threshold || !e.BreachedSince.Equal(t0) {
		t.Errorf("audited alert = %+v (%v), want the w1 value past its threshold since %s", e, err, t0)
	}
	var audits int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM audit_log WHERE action = 'drift.alert' AND object_name = 'fraud'`).Scan(&audits); err != nil {
		t.Fatal(err)
	}
	if audits != 1 {
		t.Errorf("%d audit entries, want 1", audits)
	}

	// Scores are stored for both live versions of both endpoints, the
	// quiet endpoint's as not enough data, and exported.
	admin := &auth.Principal{Name: "admin", PlatformRole: auth.RolePlatformAdmin}
	svc := drift.NewService(pool, drift.NewReader(ch, drift.ReaderConfig{}), clk)
	scores, alerts, err := svc.History(ctx, admin, "fraud", t0)
	if err != nil {
		t.Fatal(err)
	}
	// 4 checks × 2 versions × (2 features + output).
	if len(scores) != 24 {
		t.Errorf("%d scores, want 24", len(scores))
	}
	if len(alerts) != 1 || alerts[0].Version != "v24" || alerts[0].FiredAt == nil {
		t.Errorf("alerts = %+v, want v24's fired", alerts)
	}
	_, quietAlerts, err := svc.History(ctx, admin, "quiet", t0)
	if err != nil {
		t.Fatal(err)
	}
	if len(quietAlerts) != 0 {
		t.Errorf("not enough data raised alerts: %+v", quietAlerts)
	}
	if got := gauge(t, reg, "fraud", "v24", stat.MetricW1); got <= stat.W1Threshold {
		t.Errorf("exported score = %v, want past %v", got, stat.W1Threshold)
	}
	if got := gauge(t, reg, "fraud", "v23", stat.MetricW1); got > 0.1 {
		t.Errorf("the stable version against itself scores %v", got)
	}
	if has(t, reg, "quiet", "v24", stat.MetricW1) {
		t.Errorf("a score without enough data is exported")
	}

	// Another team's caller sees no such endpoint.
	stranger := &auth.Principal{Name: "x", Teams: []auth.Membership{{TeamID: 999_999, Role: "admin"}}}
	if _, _, err := svc.History(ctx, stranger, "fraud", t0); !errors.Is(err, db.ErrNotFound) {
		t.Errorf("History for another team: %v, want not found", err)
	}
	if _, err := svc.Report(ctx, stranger, "fraud", drift.Query{}); !errors.Is(err, db.ErrNotFound) {
		t.Errorf("Report for another team: %v, want not found", err)
	}

	// The report defaults: v23 (stable) against itself; v24 named.
	rep, err := svc.Report(ctx, admin, "fraud", drift.Query{Version: "v24"})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Reference.Version != "v23" || rep.Current.Version != "v24" || rep.Verdict != drift.VerdictDrifting ||
		!rep.Current.To.Equal(clk.Now()) || !rep.Reference.To.Equal(clk.Now().Add(-time.Hour)) || rep.Reference.From != clk.Now().Add(-time.Hour-7*24*time.Hour) {
		t.Errorf("report windows %+v %+v verdict %s", rep.Reference, rep.Current, rep.Verdict)
	}
	var verrs field.Errors
	if _, err := svc.Report(ctx, admin, "fraud", drift.Query{Reference: "sometime"}); !errors.As(err, &verrs) {
		t.Errorf("bad reference: %v, want validation errors", err)
	}

	// Back to normal: v24 now answers like v23, the alert resolves.
	if err := ch.Exec(ctx, "ALTER TABLE prediction_samples DELETE WHERE version = 'v24'"); err != nil {
		t.Fatal(err)
	}
	waitMutations(t, ch)
	insertID(t, ch, "fraud", endpointID(t, pool, "fraud"), rows("v24", t0.Add(-40*time.Minute), 40*time.Minute, normal(1000, 100, 20, 4), normal(1000, 40, 10, 5), normal(1000, 0.12, 0.18, 6)))
	clk.Set(t0.Add(20 * time.Minute))
	if err := c.Check(ctx); err != nil {
		t.Fatal(err)
	}
	if evs := events.Next(t); len(evs) != 1 || evs[0].Kind != drift.EventKind || evs[0].Type != "resolved" || evs[0].State != "v24 "+stat.MetricW1 {
		t.Errorf("events after recovery = %+v, want the resolution of v24 %s", evs, stat.MetricW1)
	}
}

func gauge(t *testing.T, reg *prometheus.Registry, endpoint, version, metric string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != "ml_serving_prediction_drift_score" {
			continue
		}
	metrics:
		for _, m := range f.GetMetric() {
			want := map[string]string{"endpoint": endpoint, "version": version, "metric": metric}
			for _, l := range m.GetLabel() {
				if want[l.GetName()] != l.GetValue() {
					continue metrics
				}
			}
			return m.GetGauge().GetValue()
		}
	}
	t.Fatalf("no gauge for %s %s %s", endpoint, version, metric)
	return math.NaN()
}

// has reports whether the gauge has a series for endpoint, version and metric.
func has(t *testing.T, reg *prometheus.Registry, endpoint, version, metric string) bool {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			if f.GetName() == "ml_serving_prediction_drift_score" && got["endpoint"] == endpoint && got["version"] == version && got["metric"] == metric {
				return true
			}
		}
	}
	return false
}

// waitMutations waits until ClickHouse has applied every mutation.
func waitMutations(t *testing.T, ch driver.Conn) {
	t.Helper()
	var n uint64
	wait.Eventually(t, 10*time.Second, func() bool {
		if err := ch.QueryRow(context.Background(), "SELECT count() FROM system.mutations WHERE database = currentDatabase() AND is_done = 0").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 0
	}, "%v mutations did not finish", wait.Show(func() any { return n }))
}
