package tenant_test

import (
	"context"
	"errors"
	"sort"
	"testing"
	"time"

	"github.com/coder/quartz"
	"github.com/jackc/pgx/v5/pgxpool"

	"modelplane/auth"
	"modelplane/db"
	"modelplane/field"
	"modelplane/internal/pgtest"
	"modelplane/tenant"
)

// t0 is whole seconds, so it survives PostgreSQL's microsecond timestamps.
var t0 = time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)

// fixture is a fresh database with teams risk and search, and users:
// ann (risk admin), bob (risk engineer), val (risk viewer), sam (search
// admin) and cat (signed in once, in no team).
type fixture struct {
	pool *pgxpool.Pool
	svc  *tenant.Service
	clk  *quartz.Mock // the services' clock, moved by hand
	keys *auth.Keys

	risk, search tenant.Team

	root, ann, bob, val, sam *auth.Principal
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	ctx := t.Context()
	pool := pgtest.New(t)
	clk := quartz.NewMock(t)
	clk.Set(t0)
	f := &fixture{pool: pool, svc: tenant.New(pool, clk), clk: clk, keys: auth.NewKeys(pool, clk)}
	f.root = &auth.Principal{UserID: 0, Name: "root@example.com", Via: "session", PlatformRole: auth.RolePlatformAdmin}
	var err error
	if f.risk, err = f.svc.CreateTeam(ctx, f.root, "risk", "Risk"); err != nil {
		t.Fatal(err)
	}
	if f.search, err = f.svc.CreateTeam(ctx, f.root, "search", "Search"); err != nil {
		t.Fatal(err)
	}
	q := db.New(pool)
	member := func(email string, team tenant.Team, role auth.Role) *auth.Principal {
		u, err := q.UserUpsert(ctx, db.UserUpsertParams{Issuer: "https://idp.example", Subject: email, Email: email, Name: email})
		if err != nil {
			t.Fatal(err)
		}
		if team.ID == 0 {
			return nil
		}
		if _, err := q.TeamMemberUpsert(ctx, db.TeamMemberUpsertParams{TeamID: team.ID, UserID: u.ID, Role: string(role)}); err != nil {
			t.Fatal(err)
		}
		return &auth.Principal{UserID: u.ID, Name: email, Via: "session", Teams: []auth.Membership{{TeamID: team.ID, Team: team.Name, Role: role}}}
	}
	f.ann = member("ann@example.com", f.risk, auth.RoleAdmin)
	f.bob = member("bob@example.com", f.risk, auth.RoleEngineer)
	f.val = member("val@example.com", f.risk, auth.RoleViewer)
	f.sam = member("sam@example.com", f.search, auth.RoleAdmin)
	member("cat@example.com", tenant.Team{}, "")
	return f
}

// auditCount counts audit rows with the given action.
func (f *fixture) auditCount(t *testing.T, action string) int {
	t.Helper()
	var n int
	if err := f.pool.QueryRow(t.Context(), "SELECT count(*) FROM audit_log WHERE action = $1", action).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// roles returns a team's members as email -> role, from the database.
func (f *fixture) roles(t *testing.T, teamID int64) map[string]auth.Role {
	t.Helper()
	rows, err := db.New(f.pool).TeamMemberListByTeam(t.Context(), teamID)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]auth.Role{}
	for _, r := range rows {
		out[r.Email] = auth.Role(r.Role)
	}
	return out
}

// fields returns the fields named by a field.Errors in err's chain, sorted;
// nil when err holds none.
func fields(err error) []string {
	var ve field.Errors
	if !errors.As(err, &ve) {
		return nil
	}
	out := make([]string, len(ve))
	for i, e := range ve {
		out[i] = e.Field
	}
	sort.Strings(out)
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

// authenticate is f.keys.Authenticate with the test's context.
func (f *fixture) authenticate(ctx context.Context, key string) (*auth.Principal, error) {
	return f.keys.Authenticate(ctx, key)
}
