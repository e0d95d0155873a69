package route_test

import (
	"encoding/json"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/coder/quartz"
	"github.com/jackc/pgx/v5/pgxpool"

	"modelplane/artifact"
	"modelplane/auth"
	"modelplane/busapi"
	"modelplane/db"
	"modelplane/endpoint"
	"modelplane/fleet"
	"modelplane/internal/pgtest"
	"modelplane/registry"
)

// fixture is a database with team risk, model fraud (v1, v2), endpoint
// fraud-ep routing v1 at 100 and v2 at 0, endpoint other-ep routing v1, one
// ready replica of each routed version placed by the fleet reconciler, and
// the routing entries its pass wrote.
type fixture struct {
	pool  *pgxpool.Pool
	fleet *fleet.Fleet
	eps   *endpoint.Service
	eng   *auth.Principal
	now   time.Time
	// fraudID is fraud-ep's id, what rollouts pass to route.Write.
	fraudID int64
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	ctx := t.Context()
	pool := pgtest.New(t)
	store, err := artifact.NewStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	tm, err := db.New(pool).TeamCreate(ctx, db.TeamCreateParams{Name: "risk"})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	clock := quartz.NewMock(t)
	clock.Set(now)
	f := &fixture{pool: pool, fleet: fleet.New(pool, fleet.Options{Clock: clock, Log: slog.New(slog.DiscardHandler)}), eps: endpoint.New(pool),
		eng: &auth.Principal{Name: "eng@example.com", Via: "session", Teams: []auth.Membership{{TeamID: tm.ID, Team: "risk", Role: auth.RoleAdmin}}},
		now: now}
	reg := registry.New(pool, store, artifact.Limits{})
	if _, err := reg.CreateModel(ctx, f.eng, registry.ModelSpec{Team: "risk", Name: "fraud", Task: registry.TaskClassification}); err != nil {
		t.Fatal(err)
	}
	man := []byte(`{"model.onnx":"` + "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef" + `"}`)
	for _, v := range []string{"v1", "v2"} {
		if _, err := reg.RegisterVersion(ctx, f.eng, "fraud", registry.VersionSpec{Name: v, Runtime: "triton", Format: "onnx",
			ArtifactURI: "s3://models/fraud/" + v, Resources: registry.Resources{GPUCount: 1, GPUMemoryMB: 4096}}, man, nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"fraud-ep", "other-ep"} {
		e, err := f.eps.Create(ctx, f.eng, endpoint.Spec{Name: name, Model: "fraud", Version: "v1", Runtime: "triton",
			Settings: endpoint.Settings{InstanceProfile: "mig-1g.10gb", MinReplicas: 1, MaxReplicas: 1, Tier: "critical", RetentionDays: 30}})
		if err != nil {
			t.Fatal(err)
		}
		if name == "fraud-ep" {
			f.fraudID = e.ID
		}
	}
	if _, err := f.eps.SetTraffic(ctx, f.eng, "fraud-ep", []endpoint.Weight{{Version: "v1", Weight: 100}, {Version: "v2", Weight: 0}}); err != nil {
		t.Fatal(err)
	}
	mig := []string{"mig-1g.10gb", "mig-1g.10gb", "mig-1g.10gb", "mig-1g.10gb", "mig-1g.10gb", "mig-1g.10gb", "mig-1g.10gb"}
	inv := []busapi.GPU{{Index: 0, Type: "A100-80GB", MemoryMB: 81920, MIG: true}}
	for i, p := range mig {
		inv[0].Slices = append(inv[0].Slices, busapi.Slice{Index: i, Profile: p})
	}
	f.heartbeat(t, inv, nil)
	if p := f.reconcile(t); p.Placed != 3 {
		t.Fatalf("pass = %+v, want fraud-ep's v1 and v2 and other-ep's v1 placed", p)
	}
	var ready []busapi.ReplicaStatus
	for i, r := range f.desired(t).Replicas {
		ready = append(ready, busapi.ReplicaStatus{ID: r.ID, State: busapi.StateReady, Addr: "127.0.0.1:" + strconv.Itoa(9000+i)})
	}
	f.heartbeat(t, inv, ready)
	if p := f.reconcile(t); p.RoutesWritten != 2 {
		t.Fatalf("pass after ready = %+v, want both routes written with their replicas", p)
	}
	return f
}

func (f *fixture) heartbeat(t *testing.T, inv []busapi.GPU, reps []busapi.ReplicaStatus) {
	t.Helper()
	if _, err := f.fleet.Observe(t.Context(), busapi.NodeStatus{Node: "node-a", BootID: "b1", LeaseSeconds: 15, GPUs: inv, Replicas: reps}); err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) reconcile(t *testing.T) fleet.Pass {
	t.Helper()
	p, err := f.fleet.Reconcile(t.Context(), f.now)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// desired is node-a's latest desired state in the outbox.
func (f *fixture) desired(t *testing.T) busapi.Desired {
	t.Helper()
	var d busapi.Desired
	f.latest(t, busapi.KVSubject(busapi.BucketDesired, "node-a"), &d)
	return d
}

// route returns the latest routing entry of an endpoint in the outbox; ok
// is false when the latest write deletes it.
func (f *fixture) route(t *testing.T, name string) (rt busapi.Route, ok bool) {
	t.Helper()
	return rt, f.latest(t, busapi.KVSubject(busapi.BucketRoutes, name), &rt)
}

// latest decodes the newest outbox payload of subject into v and reports
// whether it was anything but a deletion (null).
func (f *fixture) latest(t *testing.T, subject string, v any) bool {
	t.Helper()
	var payload []byte
	if err := f.pool.QueryRow(t.Context(), "SELECT payload FROM outbox WHERE subject = $1 ORDER BY id DESC LIMIT 1", subject).Scan(&payload); err != nil {
		t.Fatalf("outbox %s: %v", subject, err)
	}
	if string(payload) == "null" {
		return false
	}
	if err := json.Unmarshal(payload, v); err != nil {
		t.Fatal(err)
	}
	return true
}

// writes counts the outbox rows of an endpoint's routing entry.
func (f *fixture) writes(t *testing.T, name string) int {
	t.Helper()
	var n int
	if err := f.pool.QueryRow(t.Context(), "SELECT count(*) FROM outbox WHERE subject = $1", busapi.KVSubject(busapi.BucketRoutes, name)).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// weights is a routing entry's split, version → weight.
func weights(rt busapi.Route) map[string]int {
	out := map[string]int{}
	for _, v := range rt.Versions {
		out[v.Name] = v.Weight
	}
	return out
}
