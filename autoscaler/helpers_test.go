package autoscaler_test

import (
	"context"
	"encoding/json"
	"log/slog"
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

// fixture is a database with team risk, model fraud (v1, v2: 4 GB each),
// model chat (c1: 40 GB on an H100) and the fleet service on a fake clock.
type fixture struct {
	pool  *pgxpool.Pool
	fleet *fleet.Fleet
	eps   *endpoint.Service
	clock *quartz.Mock // the fleet's clock, moved by hand
	eng   *auth.Principal
	root  *auth.Principal
	start time.Time
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	ctx := t.Context()
	pool := pgtest.New(t)
	store, err := artifact.NewStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	reg := registry.New(pool, store, artifact.Limits{})
	tm, err := db.New(pool).TeamCreate(ctx, db.TeamCreateParams{Name: "risk"})
	if err != nil {
		t.Fatal(err)
	}
	c := quartz.NewMock(t)
	c.Set(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	f := &fixture{pool: pool, fleet: fleet.New(pool, fleet.Options{Clock: c, Log: slog.New(slog.DiscardHandler)}), eps: endpoint.New(pool), clock: c,
		eng:   &auth.Principal{Name: "eng@example.com", Via: "session", Teams: []auth.Membership{{TeamID: tm.ID, Team: "risk", Role: auth.RoleAdmin}}},
		root:  &auth.Principal{Name: "root@example.com", Via: "session", PlatformRole: auth.RolePlatformAdmin},
		start: c.Now()}
	man := []byte(`{"model.onnx":"` + "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef" + `"}`)
	for _, m := range []struct {
		model    string
		task     string
		versions []string
		res      registry.Resources
	}{
		{"fraud", registry.TaskClassification, []string{"v1", "v2"}, registry.Resources{GPUCount: 1, GPUMemoryMB: 4096}},
		{"chat", registry.TaskLLM, []string{"c1"}, registry.Resources{GPUCount: 1, GPUMemoryMB: 40960, GPUType: "H100-80GB"}},
		{"big", registry.TaskLLM, []string{"b1"}, registry.Resources{GPUCount: 4, GPUMemoryMB: 81920, GPUType: "A100-80GB"}},
	} {
		if _, err := reg.CreateModel(ctx, f.eng, registry.ModelSpec{Team: "risk", Name: m.model, Task: m.task}); err != nil {
			t.Fatal(err)
		}
		for _, v := range m.versions {
			if _, err := reg.RegisterVersion(ctx, f.eng, m.model, registry.VersionSpec{Name: v, Runtime: "triton", Format: "onnx",
				ArtifactURI: "s3://models/" + m.model + "/" + v, Resources: m.res}, man, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	return f
}

func (f *fixture) endpoint(t *testing.T, name, model, version, profile, tier string, replicas int32) {
	t.Helper()
	_, err := f.eps.Create(t.Context(), f.eng, endpoint.Spec{Name: name, Model: model, Version: version,
		Settings: endpoint.Settings{InstanceProfile: profile, MinReplicas: replicas, MaxReplicas: max(replicas, 1), Tier: tier, RetentionDays: 30}})
	if err != nil {
		t.Fatal(err)
	}
}

// gpus builds an inventory: n GPUs of a type, with MIG layout (nil: whole GPUs).
func gpus(start, n int, typ string, mig []string) []busapi.GPU {
	var out []busapi.GPU
	for i := start; i < start+n; i++ {
		g := busapi.GPU{Index: i, Type: typ, MemoryMB: 81920, MIG: mig != nil}
		if mig == nil {
			g.Slices = []busapi.Slice{{Index: 0, Profile: busapi.ProfileFull}}
		}
		for j, p := range mig {
			g.Slices = append(g.Slices, busapi.Slice{Index: j, Profile: p})
		}
		out = append(out, g)
	}
	return out
}

func seven1g() []string {
	return []string{"mig-1g.10gb", "mig-1g.10gb", "mig-1g.10gb", "mig-1g.10gb", "mig-1g.10gb", "mig-1g.10gb", "mig-1g.10gb"}
}

func (f *fixture) heartbeat(t *testing.T, node string, inv []busapi.GPU, reps ...busapi.ReplicaStatus) bool {
	t.Helper()
	changed, err := f.fleet.Observe(t.Context(), busapi.NodeStatus{Node: node, BootID: "b1", LeaseSeconds: 15, GPUs: inv, Replicas: reps})
	if err != nil {
		t.Fatal(err)
	}
	return changed
}

func (f *fixture) reconcile(t *testing.T) fleet.Pass {
	t.Helper()
	p, err := f.fleet.Reconcile(t.Context(), f.start)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// desired returns the latest desired state of a node from the outbox.
func (f *fixture) desired(t *testing.T, node string) busapi.Desired {
	t.Helper()
	var payload []byte
	err := f.pool.QueryRow(t.Context(), "SELECT payload FROM outbox WHERE subject = $1 ORDER BY id DESC LIMIT 1",
		busapi.KVSubject(busapi.BucketDesired, node)).Scan(&payload)
	if err != nil {
		t.Fatalf("desired of %s: %v", node, err)
	}
	var d busapi.Desired
	if err := json.Unmarshal(payload, &d); err != nil {
		t.Fatal(err)
	}
	return d
}

func (f *fixture) get(t *testing.T, name string) endpoint.Endpoint {
	t.Helper()
	e, err := f.eps.Get(context.Background(), f.eng, name)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// ready reports every replica of a node's desired state as ready.
func ready(d busapi.Desired) []busapi.ReplicaStatus {
	var out []busapi.ReplicaStatus
	for i, r := range d.Replicas {
		out = append(out, busapi.ReplicaStatus{ID: r.ID, State: busapi.StateReady, Addr: "127.0.0.1:" + string(rune('0'+i%10)) + "000"})
	}
	return out
}
