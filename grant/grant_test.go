package grant_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"modelplane/artifact"
	"modelplane/audit"
	"modelplane/auth"
	"modelplane/busapi"
	"modelplane/db"
	"modelplane/endpoint"
	"modelplane/field"
	"modelplane/grant"
	"modelplane/internal/pgtest"
	"modelplane/registry"
)

// fixture is a database with teams risk (endpoint fraud-scoring over model
// fraud), search and ads, and principals of each kind.
type fixture struct {
	pool                                 *pgxpool.Pool
	svc                                  *grant.Service
	root, riskEng, riskViewer, searchEng *auth.Principal
	published                            int
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	ctx := t.Context()
	pool := pgtest.New(t)
	f := &fixture{pool: pool}
	f.svc = grant.New(pool, nil, func() { f.published++ })
	q := db.New(pool)
	ids := map[string]int64{}
	for _, name := range []string{"risk", "search", "ads"} {
		tm, err := q.TeamCreate(ctx, db.TeamCreateParams{Name: name})
		if err != nil {
			t.Fatal(err)
		}
		ids[name] = tm.ID
	}
	in := func(name, team string, role auth.Role) *auth.Principal {
		return &auth.Principal{Name: name, Via: "session", Teams: []auth.Membership{{TeamID: ids[team], Team: team, Role: role}}}
	}
	f.root = &auth.Principal{Name: "root@example.com", Via: "session", PlatformRole: auth.RolePlatformAdmin}
	f.riskEng = in("bob@example.com", "risk", auth.RoleEngineer)
	f.riskViewer = in("val@example.com", "risk", auth.RoleViewer)
	f.searchEng = in("sue@example.com", "search", auth.RoleEngineer)
	store, err := artifact.NewStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	reg := registry.New(pool, store, artifact.Limits{})
	if _, err := reg.CreateModel(ctx, f.riskEng, registry.ModelSpec{Team: "risk", Name: "fraud", Task: registry.TaskClassification,
		InputSchema: json.RawMessage(`{"type":"object","properties":{"amount":{"type":"number"}}}`)}); err != nil {
		t.Fatal(err)
	}
	man := []byte(`{"model.onnx":"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}`)
	if _, err := reg.RegisterVersion(ctx, f.riskEng, "fraud", registry.VersionSpec{Name: "v1", Runtime: "triton", Format: "onnx",
		ArtifactURI: "s3://models/fraud/v1"}, man, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := endpoint.New(pool).Create(ctx, f.riskEng, endpoint.Spec{Name: "fraud-scoring", Model: "fraud", Version: "v1",
		Settings: endpoint.Settings{InstanceProfile: "gpu-h100-80gb", MinReplicas: 1, MaxReplicas: 1, Tier: "standard", RetentionDays: 30}}); err != nil {
		t.Fatal(err)
	}
	return f
}

// lastRoute is the newest routing entry of endpoint in the outbox.
func (f *fixture) lastRoute(t *testing.T, name string) busapi.Route {
	t.Helper()
	rows, err := db.New(f.pool).OutboxPending(t.Context(), 10_000)
	if err != nil {
		t.Fatal(err)
	}
	var rt busapi.Route
	found := false
	for _, r := range rows {
		if r.Subject == busapi.KVSubject(busapi.BucketRoutes, name) {
			rt = busapi.Route{}
			if err := json.Unmarshal(r.Payload, &rt); err != nil {
				t.Fatal(err)
			}
			found = true
		}
	}
	if !found {
		t.Fatalf("no routing entry of %s in the outbox", name)
	}
	return rt
}

// auditActions are the audit log's actions on grants of endpoint, oldest first.
func (f *fixture) auditActions(t *testing.T) []string {
	t.Helper()
	rows, err := audit.NewLog(f.pool).List(t.Context(), f.root, audit.Filter{ObjectType: "endpoint_grant", Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for i := len(rows) - 1; i >= 0; i-- {
		out = append(out, rows[i].Action+" "+rows[i].ObjectName+" by "+rows[i].Actor)
	}
	return out
}

// TestGrantReachesTheRoutingEntryAndTheAuditLog: a grant, a change of its
// limits and its revocation each write the routing entry gateways serve
// from and an audit row, in the change's own transaction.
func TestGrantReachesTheRoutingEntryAndTheAuditLog(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := t.Context()
	g, err := f.svc.Set(ctx, f.riskEng, "fraud-scoring", "search", grant.Limits{RateLimitRPS: 20, DailyQuota: 10_000, Sampling: true})
	if err != nil {
		t.Fatal(err)
	}
	if g.Team != "search" || g.GrantedBy != "bob@example.com" || g.DailyQuota != 10_000 {
		t.Errorf("grant = %+v", g)
	}
	rt := f.lastRoute(t, "fraud-scoring")
	if want := []busapi.RouteGrant{{Team: "search", RateLimitRPS: 20, DailyQuota: 10_000, Sampling: true}}; fmt.Sprint(rt.Grants) != fmt.Sprint(want) {
		t.Errorf("entry grants %+v, want %+v", rt.Grants, want)
	}
	gen := rt.Generation
	if _, err := f.svc.Set(ctx, f.riskEng, "fraud-scoring", "ads", grant.Limits{}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.svc.Set(ctx, f.riskEng, "fraud-scoring", "search", grant.Limits{RateLimitRPS: 5}); err != nil {
		t.Fatal(err)
	}
	rt = f.lastRoute(t, "fraud-scoring")
	if want := []busapi.RouteGrant{{Team: "ads"}, {Team: "search", RateLimitRPS: 5}}; fmt.Sprint(rt.Grants) != fmt.Sprint(want) || rt.Generation != gen+2 {
		t.Errorf("entry grants %+v generation %d, want %+v at %d", rt.Grants, rt.Generation, want, gen+2)
	}
	rv, err := f.svc.Revoke(ctx, f.riskEng, "fraud-scoring", "search")
	if err != nil {
		t.Fatal(err)
	}
	if rv.Revoked.Team != "search" || rv.Revoked.RateLimitRPS != 5 || len(rv.BrokenGraphs) != 0 {
		t.Errorf("revocation = %+v, want search's grant and no graphs", rv)
	}
	if rt = f.lastRoute(t, "fraud-scoring"); fmt.Sprint(rt.Grants) != fmt.Sprint([]busapi.RouteGrant{{Team: "ads"}}) {
		t.Errorf("entry after the revocation grants %+v, want ads only", rt.Grants)
	}
	want := []string{"grant.create fraud-scoring/search by bob@example.com", "grant.create fraud-scoring/ads by bob@example.com",
		"grant.update fraud-scoring/search by bob@example.com", "grant.revoke fraud-scoring/search by bob@example.com"}
	if got := f.auditActions(t); !slices.Equal(got, want) {
		t.Errorf("audit %q, want %q", got, want)
	}
	if f.published != 4 {
		t.Errorf("relay woken %d times, want once per change (4)", f.published)
	}
	gs, err := f.svc.List(ctx, f.riskViewer, "fraud-scoring")
	if err != nil || len(gs) != 1 || gs[0].Team != "ads" {
		t.Errorf("risk viewer lists %+v (%v), want ads' grant", gs, err)
	}
}

// TestGrantRules: who may grant, to whom, and with which limits.
func TestGrantRules(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := t.Context()
	for _, c := range []struct {
		name   string
		p      *auth.Principal
		team   string
		l      grant.Limits
		want   error
		fields []string
	}{
		{"a viewer of the owning team may not share", f.riskViewer, "search", grant.Limits{}, auth.ErrForbidden, nil},
		{"another team sees no endpoint to share", f.searchEng, "ads", grant.Limits{}, db.ErrNotFound, nil},
		{"the owning team needs no grant", f.riskEng, "risk", grant.Limits{}, nil, []string{"team"}},
		{"an unknown team is a field error", f.riskEng, "no-such-team", grant.Limits{}, nil, []string{"team"}},
		{"limits are not negative", f.riskEng, "search", grant.Limits{RateLimitRPS: -1, RateLimitBurst: -1, DailyQuota: -5}, nil,
			[]string{"rate_limit_rps", "rate_limit_burst", "daily_quota"}},
		{"a platform admin may share any endpoint", f.root, "search", grant.Limits{}, nil, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := f.svc.Set(ctx, c.p, "fraud-scoring", c.team, c.l)
			var fe field.Errors
			switch {
			case c.want != nil:
				if !errors.Is(err, c.want) {
					t.Errorf("err = %v, want %v", err, c.want)
				}
			case c.fields != nil:
				if !errors.As(err, &fe) {
					t.Fatalf("err = %v, want field errors on %v", err, c.fields)
				}
				var got []string
				for _, e := range fe {
					got = append(got, e.Field)
				}
				if !slices.Equal(got, c.fields) {
					t.Errorf("field errors on %v, want %v", got, c.fields)
				}
			case err != nil:
				t.Errorf("err = %v, want none", err)
			}
		})
	}
	if _, err := f.svc.Revoke(ctx, f.riskEng, "fraud-scoring", "ads"); !errors.Is(err, db.ErrNotFound) {
		t.Errorf("revoking a grant that does not exist: %v, want not found", err)
	}
	if _, err := f.svc.Revoke(ctx, f.riskViewer, "fraud-scoring", "search"); !errors.Is(err, auth.ErrForbidden) {
		t.Errorf("a viewer revoking: %v, want forbidden", err)
	}
}

// graphs is the Dependents the graph package will supply: the graphs of
// each team calling each endpoint id.
type graphs map[string][]string

func (g graphs) GraphsUsing(_ context.Context, endpointID int64, team string) ([]string, error) {
	return g[fmt.Sprintf("%d/%s", endpointID, team)], nil
}

// TestRevokeNamesTheGraphsItBreaks: revoking a grant that inference
// graphs call through still revokes it, and names those graphs; a lookup
// that fails leaves the grant in place.
func TestRevokeNamesTheGraphsItBreaks(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := t.Context()
	for _, team := range []string{"search", "ads"} {
		if _, err := f.svc.Set(ctx, f.riskEng, "fraud-scoring", team, grant.Limits{}); err != nil {
			t.Fatal(err)
		}
	}
	id := f.lastRoute(t, "fraud-scoring").EndpointID
	f.svc.SetDependents(graphs{fmt.Sprintf("%d/search", id): {"document-processor", "kyc-check"}})
	rv, err := f.svc.Revoke(ctx, f.riskEng, "fraud-scoring", "search")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rv.BrokenGraphs, []string{"document-processor", "kyc-check"}) {
		t.Errorf("broken graphs %v, want document-processor and kyc-check", rv.BrokenGraphs)
	}
	rows, err := audit.NewLog(f.pool).List(ctx, f.root, audit.Filter{Action: "grant.revoke", Limit: 1})
	if err != nil || len(rows) != 1 || !strings.Contains(string(rows[0].Before), "document-processor") {
		t.Errorf("revocation's audit row %+v (%v), want the broken graphs in it", rows, err)
	}
	f.svc.SetDependents(failing{})
	if _, err := f.svc.Revoke(ctx, f.riskEng, "fraud-scoring", "ads"); err == nil {
		t.Fatal("revoke with a failing graph lookup succeeded")
	}
	if gs, _ := f.svc.List(ctx, f.riskEng, "fraud-scoring"); len(gs) != 1 || gs[0].Team != "ads" {
		t.Errorf("grants after a failed revocation %+v, want ads' kept", gs)
	}
	f.svc.SetDependents(nil)
	if rv, err := f.svc.Revoke(ctx, f.riskEng, "fraud-scoring", "ads"); err != nil || len(rv.BrokenGraphs) != 0 {
		t.Errorf("revoke with the default lookup: %+v, %v; want no graphs", rv, err)
	}
}

type failing struct{}

func (failing) GraphsUsing(context.Context, int64, string) ([]string, error) {
	return nil, errors.New("graph store down")
}

// TestSharedWithMe: a consumer lists what other teams shared with its
// teams, with the models' schemas; the owners' own endpoints are not in
// it, and a team with nothing shared sees nothing.
func TestSharedWithMe(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := t.Context()
	if _, err := f.svc.Set(ctx, f.riskEng, "fraud-scoring", "search", grant.Limits{DailyQuota: 500}); err != nil {
		t.Fatal(err)
	}
	got, err := f.svc.SharedWith(ctx, f.searchEng)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Endpoint != "fraud-scoring" || got[0].Owner != "risk" || got[0].Team != "search" || got[0].Model != "fraud" ||
		got[0].DailyQuota != 500 || !strings.Contains(string(got[0].InputSchema), `"amount"`) {
		t.Errorf("shared with search: %+v", got)
	}
	for _, p := range []*auth.Principal{f.riskEng, f.root} {
		if got, err := f.svc.SharedWith(ctx, p); err != nil || len(got) != 0 {
			t.Errorf("shared with %s: %+v (%v), want nothing", p.Name, got, err)
		}
	}
}
