package rollout_test

import (
	"context"
	"encoding/json"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/coder/quartz"
	"github.com/jackc/pgx/v5/pgxpool"

	"modelplane/artifact"
	"modelplane/auth"
	"modelplane/busapi"
	"modelplane/db"
	"modelplane/endpoint"
	"modelplane/internal/chtest"
	"modelplane/internal/pgtest"
	"modelplane/judge"
	"modelplane/registry"
	"modelplane/rollout"
)

func TestMain(m *testing.M) {
	code := m.Run()
	chtest.Stop()
	pgtest.Stop()
	os.Exit(code)
}

// stats serves fixed windows per version: the judge's input, which the
// tests set. Reading them from ClickHouse is traffic.Reader.Totals's job,
// tested there and in the end-to-end test in package app.
type stats struct {
	mu sync.Mutex
	w  map[string]judge.Window
	// past, when set, answers windows that end by until (the traffic
	// before a blue-green switch); fail makes every read fail (ClickHouse
	// down).
	past  map[string]judge.Window
	until time.Time
	fail  error
	// arrived, when set, is how far the statistics have reached
	// ClickHouse: a window starting at or after it reads nothing (ingest
	// lags), and Through answers it.
	arrived time.Time
}

// lag makes the statistics arrive only up to at.
func (s *stats) lag(at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.arrived = at
}

func (s *stats) Through(_ context.Context, _ string, _ int64, since time.Time) (time.Time, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail != nil {
		return time.Time{}, s.fail
	}
	if s.arrived.After(since) {
		return s.arrived, nil
	}
	return time.Time{}, nil
}

// setPast makes windows ending by until read past.
func (s *stats) setPast(until time.Time, past map[string]judge.Window) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.until, s.past = until, past
}

func (s *stats) setFail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fail = err
}

func (s *stats) set(version string, w judge.Window) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.w[version] = w
}

func (s *stats) Totals(_ context.Context, _ string, _ int64, from, to time.Time) (map[string]judge.Window, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail != nil {
		return nil, s.fail
	}
	src := s.w
	if s.past != nil && !to.After(s.until) {
		src = s.past
	}
	out := map[string]judge.Window{}
	if !s.arrived.IsZero() && !from.Before(s.arrived) {
		return out, nil
	}
	for k, v := range src {
		out[k] = v
	}
	return out, nil
}

// window is n requests with errs errors, all in latency bucket b.
func window(n, errs uint64, b int) judge.Window {
	h := make([]uint64, busapi.LatencyBuckets)
	h[b] = n
	return judge.Window{Requests: n, Errors: errs, Latency: h}
}

type fixture struct {
	pool  *pgxpool.Pool
	svc   *rollout.Service
	clock *quartz.Mock // the service's and the controller's clock, moved by hand
	stats *stats
	// drift is the controller's drift measurer; nil unless a test gates
	// on drift.
	drift rollout.DriftMeasurer

	riskID, searchID                int64
	eng, admin, admin2, viewer, sue *auth.Principal
}

// newFixture: team risk with model fraud (v1 serving endpoint "fraud-scoring"
// at 100 percent, v2 and v3 registered, SLA p99 50 ms), team search with
// endpoint "ranking". Principals: risk engineer eng, risk admins admin and
// admin2, risk viewer, search engineer sue.
func newFixture(t *testing.T) *fixture {
	t.Helper()
	ctx := t.Context()
	pool := pgtest.New(t)
	store, err := artifact.NewStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	reg := registry.New(pool, store, artifact.Limits{})
	clk := quartz.NewMock(t)
	clk.Set(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	f := &fixture{pool: pool, clock: clk, stats: &stats{w: map[string]judge.Window{}}}
	f.svc = rollout.New(pool, f.clock, nil)
	q := db.New(pool)
	for name, id := range map[string]*int64{"risk": &f.riskID, "search": &f.searchID} {
		tm, err := q.TeamCreate(ctx, db.TeamCreateParams{Name: name})
		if err != nil {
			t.Fatal(err)
		}
		*id = tm.ID
	}
	in := func(uid int64, name string, teamID int64, team string, role auth.Role) *auth.Principal {
		return &auth.Principal{UserID: uid, Name: name, Via: "session", Teams: []auth.Membership{{TeamID: teamID, Team: team, Role: role}}}
	}
	f.eng = in(1, "bob@example.com", f.riskID, "risk", auth.RoleEngineer)
	f.admin = in(2, "ann@example.com", f.riskID, "risk", auth.RoleAdmin)
	f.admin2 = in(3, "ada@example.com", f.riskID, "risk", auth.RoleAdmin)
	f.viewer = in(4, "val@example.com", f.riskID, "risk", auth.RoleViewer)
	f.sue = in(5, "sue@example.com", f.searchID, "search", auth.RoleEngineer)
	man := []byte(`{"model.onnx":"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}`)
	sla := 50.0
	for _, m := range []struct {
		p        *auth.Principal
		team     string
		model    string
		endpoint string
		versions []string
	}{
		{f.eng, "risk", "fraud", "fraud-scoring", []string{"v1", "v2", "v3"}},
		{f.sue, "search", "ranker", "ranking", []string{"r1", "r2"}},
	} {
		if _, err := reg.CreateModel(ctx, m.p, registry.ModelSpec{Team: m.team, Name: m.model, Task: registry.TaskClassification}); err != nil {
			t.Fatal(err)
		}
		for _, v := range m.versions {
			if _, err := reg.RegisterVersion(ctx, m.p, m.model, registry.VersionSpec{Name: v, Runtime: "triton", Format: "onnx",
				ArtifactURI: "s3://models/" + m.model + "/" + v, SLA: registry.SLA{P99LatencyMs: &sla}}, man, nil); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := endpoint.New(pool).Create(ctx, m.p, endpoint.Spec{Name: m.endpoint, Model: m.model, Version: m.versions[0], Runtime: "triton",
			Settings: endpoint.Settings{InstanceProfile: "gpu-h100-80gb", MinReplicas: 1, MaxReplicas: 2, Tier: "standard", RetentionDays: 30}}); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// pass runs one pass of a controller made for it: every pass is a
// controller that just started, as after a control-plane restart, so
// nothing may depend on memory kept between passes.
func (f *fixture) pass(t *testing.T) {
	t.Helper()
	c := rollout.NewController(rollout.ControllerConfig{Pool: f.pool, Stats: f.stats, Drift: f.drift, Clock: f.clock})
	if err := c.Pass(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// ready marks a ready replica of version on the endpoint, as the fleet
// would once an agent reported it.
func (f *fixture) ready(t *testing.T, endpointName, version string) {
	t.Helper()
	ctx := t.Context()
	_, err := f.pool.Exec(ctx, `INSERT INTO nodes (name, lease_seconds, last_heartbeat) VALUES ('n1', 15, now()) ON CONFLICT DO NOTHING`)
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.pool.Exec(ctx, `INSERT INTO replicas (name, team_id, endpoint_id, version_id, node_id, gpu_type, profile, state, addr)
		SELECT e.name || '-' || v.name, e.team_id, e.id, v.id, (SELECT id FROM nodes WHERE name = 'n1'), 'H100-80GB', 'full', 'ready', '127.0.0.1:1'
		FROM endpoints e JOIN model_versions v ON v.model_id = e.model_id WHERE e.name = $1 AND v.name = $2`, endpointName, version)
	if err != nil {
		t.Fatal(err)
	}
}

// weights returns the endpoint's routing rules as version → weight (and
// shadow percent under version+"/shadow" when above 0).
func (f *fixture) weights(t *testing.T, endpointName string) map[string]float64 {
	t.Helper()
	rows, err := f.pool.Query(t.Context(), `SELECT v.name, r.weight, r.shadow_percent FROM routing_rules r
		JOIN endpoints e ON e.id = r.endpoint_id JOIN model_versions v ON v.id = r.version_id WHERE e.name = $1`, endpointName)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]float64{}
	for rows.Next() {
		var name string
		var w int32
		var s float64
		if err := rows.Scan(&name, &w, &s); err != nil {
			t.Fatal(err)
		}
		out[name] = float64(w)
		if s > 0 {
			out[name+"/shadow"] = s
		}
	}
	return out
}

func (f *fixture) get(t *testing.T, id int64) rollout.Rollout {
	t.Helper()
	r, err := f.svc.Get(t.Context(), f.admin, id)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// published returns the weights of the newest routing entry written to the
// outbox for the endpoint (what the gateways will get), as version → weight.
func (f *fixture) published(t *testing.T, endpointName string) map[string]float64 {
	t.Helper()
	var payload []byte
	if err := f.pool.QueryRow(t.Context(), `SELECT payload FROM outbox WHERE subject = $1 ORDER BY id DESC LIMIT 1`,
		busapi.KVSubject(busapi.BucketRoutes, endpointName)).Scan(&payload); err != nil {
		t.Fatalf("routing entry of %s: %v", endpointName, err)
	}
	var rt busapi.Route
	if err := json.Unmarshal(payload, &rt); err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, v := range rt.Versions {
		out[v.Name] = float64(v.Weight)
	}
	return out
}

// count counts rows of a query with one argument.
func (f *fixture) count(t *testing.T, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := f.pool.QueryRow(t.Context(), sql, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func equal(a, b map[string]float64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
