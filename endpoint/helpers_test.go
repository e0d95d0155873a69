package endpoint_test

import (
	"encoding/json"
	"errors"
	"sort"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"modelplane/artifact"
	"modelplane/auth"
	"modelplane/db"
	"modelplane/endpoint"
	"modelplane/field"
	"modelplane/internal/pgtest"
	"modelplane/registry"
)

// fixture is a fresh database with teams risk (model fraud, versions v1, v2
// and v3) and search (model ranker, version r1), and principals of each role.
type fixture struct {
	pool *pgxpool.Pool
	svc  *endpoint.Service

	riskID, searchID int64

	root, riskEng, riskViewer, searchEng *auth.Principal
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
	f := &fixture{pool: pool, svc: endpoint.New(pool)}
	q := db.New(pool)
	for name, id := range map[string]*int64{"risk": &f.riskID, "search": &f.searchID} {
		tm, err := q.TeamCreate(ctx, db.TeamCreateParams{Name: name})
		if err != nil {
			t.Fatal(err)
		}
		*id = tm.ID
	}
	in := func(name string, teamID int64, team string, role auth.Role) *auth.Principal {
		return &auth.Principal{Name: name, Via: "session", Teams: []auth.Membership{{TeamID: teamID, Team: team, Role: role}}}
	}
	f.root = &auth.Principal{Name: "root@example.com", Via: "session", PlatformRole: auth.RolePlatformAdmin}
	f.riskEng = in("bob@example.com", f.riskID, "risk", auth.RoleEngineer)
	f.riskViewer = in("val@example.com", f.riskID, "risk", auth.RoleViewer)
	f.searchEng = in("sue@example.com", f.searchID, "search", auth.RoleEngineer)
	man := []byte(`{"model.onnx":"` + "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef" + `"}`)
	for _, m := range []struct {
		p        *auth.Principal
		team     string
		model    string
		versions []string
	}{
		{f.riskEng, "risk", "fraud", []string{"v1", "v2", "v3"}},
		{f.searchEng, "search", "ranker", []string{"r1"}},
	} {
		if _, err := reg.CreateModel(ctx, m.p, registry.ModelSpec{Team: m.team, Name: m.model, Task: registry.TaskClassification}); err != nil {
			t.Fatal(err)
		}
		for _, v := range m.versions {
			if _, err := reg.RegisterVersion(ctx, m.p, m.model, registry.VersionSpec{Name: v, Runtime: "triton", Format: "onnx",
				ArtifactURI: "s3://models/" + m.model + "/" + v}, man, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	return f
}

// settings are valid endpoint settings.
var settings = endpoint.Settings{InstanceProfile: "gpu-h100-80gb", MinReplicas: 1, MaxReplicas: 2, Tier: "standard", SamplingRate: 0.1, RetentionDays: 30}

// create makes an endpoint of fraud at v1 as risk's engineer.
func (f *fixture) create(t *testing.T, name string) endpoint.Endpoint {
	t.Helper()
	e, err := f.svc.Create(t.Context(), f.riskEng, endpoint.Spec{Name: name, Model: "fraud", Version: "v1", Runtime: "triton", Settings: settings})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// audit is one audit row about an object.
type audit struct {
	Actor         string
	Before, After map[string]any
	BeforeRaw     []byte
	AfterRaw      []byte
}

// audits returns the audit rows of an action on an object, oldest first.
func (f *fixture) audits(t *testing.T, action, object string) []audit {
	t.Helper()
	rows, err := f.pool.Query(t.Context(), "SELECT actor, before, after FROM audit_log WHERE action = $1 AND object_name = $2 ORDER BY id", action, object)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []audit
	for rows.Next() {
		var a audit
		if err := rows.Scan(&a.Actor, &a.BeforeRaw, &a.AfterRaw); err != nil {
			t.Fatal(err)
		}
		if a.BeforeRaw != nil {
			_ = json.Unmarshal(a.BeforeRaw, &a.Before) // a list for traffic changes: see BeforeRaw
		}
		if a.AfterRaw != nil {
			_ = json.Unmarshal(a.AfterRaw, &a.After)
		}
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// countAudit counts all audit rows.
func (f *fixture) countAudit(t *testing.T) int {
	t.Helper()
	var n int
	if err := f.pool.QueryRow(t.Context(), "SELECT count(*) FROM audit_log").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// traffic returns an endpoint's traffic as stored.
func (f *fixture) traffic(t *testing.T, name string) []endpoint.Weight {
	t.Helper()
	e, err := f.svc.Get(t.Context(), f.root, name)
	if err != nil {
		t.Fatal(err)
	}
	return e.Traffic
}

func equalWeights(a, b []endpoint.Weight) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// fieldErrors returns the field errors in err's chain, sorted by field.
func fieldErrors(err error) field.Errors {
	var ve field.Errors
	if !errors.As(err, &ve) {
		return nil
	}
	out := append(field.Errors(nil), ve...)
	sort.Slice(out, func(i, j int) bool { return out[i].Field < out[j].Field })
	return out
}

func fields(err error) []string {
	var out []string
	for _, e := range fieldErrors(err) {
		out = append(out, e.Field)
	}
	return out
}

func hasField(err error, field string) bool {
	for _, f := range fields(err) {
		if f == field {
			return true
		}
	}
	return false
}
