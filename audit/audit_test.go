package audit_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"modelplane/audit"
	"modelplane/auth"
	"modelplane/db"
	"modelplane/internal/pgtest"
)

// fixture holds a database with teams risk and search and these records,
// oldest first (ids 1..7):
//
//	1 risk   ann  model.create    model    fraud
//	2 risk   bob  endpoint.create endpoint fraud-prod
//	3 search sue  model.create    model    ranker
//	4 risk   bob  endpoint.update endpoint fraud-prod  (before and after)
//	5 -      root team.create     team     fraud-ml    (platform-wide)
//	6 search key  endpoint.create endpoint ranker-prod (by API key)
//	7 risk   ann  model.create    model    scorer
type fixture struct {
	q                *db.Queries
	log              *audit.Log
	riskID, searchID int64
	ids              []int64
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	ctx := t.Context()
	pool := pgtest.New(t)
	f := &fixture{q: db.New(pool), log: audit.NewLog(pool)}
	for name, id := range map[string]*int64{"risk": &f.riskID, "search": &f.searchID} {
		tm, err := f.q.TeamCreate(ctx, db.TeamCreateParams{Name: name})
		if err != nil {
			t.Fatal(err)
		}
		*id = tm.ID
	}
	user := func(name string) *auth.Principal { return &auth.Principal{UserID: 1, Name: name, Via: "session"} }
	key := &auth.Principal{KeyID: 9, Name: "mpk_0123456789ab", Via: "api-key"}
	records := []struct {
		p *auth.Principal
		e audit.Entry
	}{
		{user("ann"), audit.Entry{TeamID: &f.riskID, Action: "model.create", ObjectType: "model", ObjectName: "fraud", After: map[string]string{"name": "fraud"}}},
		{user("bob"), audit.Entry{TeamID: &f.riskID, Action: "endpoint.create", ObjectType: "endpoint", ObjectName: "fraud-prod"}},
		{user("sue"), audit.Entry{TeamID: &f.searchID, Action: "model.create", ObjectType: "model", ObjectName: "ranker"}},
		{user("bob"), audit.Entry{TeamID: &f.riskID, Action: "endpoint.update", ObjectType: "endpoint", ObjectName: "fraud-prod",
			Before: map[string]int{"max_replicas": 2}, After: map[string]int{"max_replicas": 8}}},
		{user("root"), audit.Entry{Action: "team.create", ObjectType: "team", ObjectName: "fraud-ml"}},
		{key, audit.Entry{TeamID: &f.searchID, Action: "endpoint.create", ObjectType: "endpoint", ObjectName: "ranker-prod"}},
		{user("ann"), audit.Entry{TeamID: &f.riskID, Action: "model.create", ObjectType: "model", ObjectName: "scorer"}},
	}
	for _, r := range records {
		if err := audit.Record(ctx, f.q, r.p, r.e); err != nil {
			t.Fatal(err)
		}
	}
	rows, err := f.log.List(ctx, &auth.Principal{PlatformRole: auth.RolePlatformAdmin}, audit.Filter{})
	if err != nil || len(rows) != len(records) {
		t.Fatalf("List all = %d rows, %v; want %d", len(rows), err, len(records))
	}
	for i := len(rows) - 1; i >= 0; i-- {
		f.ids = append(f.ids, rows[i].ID)
	}
	return f
}

// objects names the rows as "object_name" in order.
func objects(rows []audit.Row) string {
	var out []string
	for _, r := range rows {
		out = append(out, r.ObjectName)
	}
	return strings.Join(out, ",")
}

func member(teamID int64, team string, role auth.Role) auth.Membership {
	return auth.Membership{TeamID: teamID, Team: team, Role: role}
}

func TestListVisibility(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := t.Context()
	tests := []struct {
		name    string
		p       *auth.Principal
		want    string
		wantErr error
	}{
		{name: "platform admin sees everything", p: &auth.Principal{PlatformRole: auth.RolePlatformAdmin},
			want: "scorer,ranker-prod,fraud-ml,fraud-prod,ranker,fraud-prod,fraud"},
		{name: "risk admin sees risk", p: &auth.Principal{Teams: []auth.Membership{member(f.riskID, "risk", auth.RoleAdmin)}},
			want: "scorer,fraud-prod,fraud-prod,fraud"},
		{name: "search admin sees search", p: &auth.Principal{Teams: []auth.Membership{member(f.searchID, "search", auth.RoleAdmin)}},
			want: "ranker-prod,ranker"},
		{name: "admin of one team, viewer of another, sees the first", p: &auth.Principal{Teams: []auth.Membership{
			member(f.riskID, "risk", auth.RoleViewer), member(f.searchID, "search", auth.RoleAdmin)}}, want: "ranker-prod,ranker"},
		{name: "admin of both", p: &auth.Principal{Teams: []auth.Membership{
			member(f.riskID, "risk", auth.RoleAdmin), member(f.searchID, "search", auth.RoleAdmin)}},
			want: "scorer,ranker-prod,fraud-prod,ranker,fraud-prod,fraud"},
		{name: "engineer forbidden", p: &auth.Principal{Teams: []auth.Membership{member(f.riskID, "risk", auth.RoleEngineer)}}, wantErr: auth.ErrForbidden},
		{name: "viewer forbidden", p: &auth.Principal{Teams: []auth.Membership{member(f.riskID, "risk", auth.RoleViewer)}}, wantErr: auth.ErrForbidden},
		{name: "finance forbidden", p: &auth.Principal{PlatformRole: auth.RoleFinance}, wantErr: auth.ErrForbidden},
		{name: "no team forbidden", p: &auth.Principal{}, wantErr: auth.ErrForbidden},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rows, err := f.log.List(ctx, tt.p, audit.Filter{})
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("List error = %v, want %v", err, tt.wantErr)
			}
			if err != nil {
				if rows != nil {
					t.Errorf("List rows on error = %v, want nil", rows)
				}
				return
			}
			if got := objects(rows); got != tt.want {
				t.Errorf("List = %s, want %s", got, tt.want)
			}
		})
	}
}

func TestListFilters(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := t.Context()
	root := &auth.Principal{PlatformRole: auth.RolePlatformAdmin}
	riskAdmin := &auth.Principal{Teams: []auth.Membership{member(f.riskID, "risk", auth.RoleAdmin)}}
	tests := []struct {
		name   string
		p      *auth.Principal
		filter audit.Filter
		want   string
	}{
		{"action", root, audit.Filter{Action: "model.create"}, "scorer,ranker,fraud"},
		{"action scoped", riskAdmin, audit.Filter{Action: "model.create"}, "scorer,fraud"},
		{"object type", root, audit.Filter{ObjectType: "endpoint"}, "ranker-prod,fraud-prod,fraud-prod"},
		{"actor", root, audit.Filter{Actor: "bob"}, "fraud-prod,fraud-prod"},
		{"actor of another team", riskAdmin, audit.Filter{Actor: "sue"}, ""},
		{"api key actor", root, audit.Filter{Actor: "mpk_0123456789ab"}, "ranker-prod"},
		{"action and actor", root, audit.Filter{Action: "endpoint.update", Actor: "bob"}, "fraud-prod"},
		{"all three", root, audit.Filter{Action: "model.create", ObjectType: "model", Actor: "ann"}, "scorer,fraud"},
		{"no match", root, audit.Filter{Action: "model.delete"}, ""},
		{"exact match only", root, audit.Filter{Action: "model"}, ""},
		{"limit", root, audit.Filter{Limit: 2}, "scorer,ranker-prod"},
		{"zero limit means the default", root, audit.Filter{Limit: 0}, "scorer,ranker-prod,fraud-ml,fraud-prod,ranker,fraud-prod,fraud"},
		{"huge limit means the default", root, audit.Filter{Limit: 1 << 30}, "scorer,ranker-prod,fraud-ml,fraud-prod,ranker,fraud-prod,fraud"},
		{"negative limit means the default", root, audit.Filter{Limit: -1}, "scorer,ranker-prod,fraud-ml,fraud-prod,ranker,fraud-prod,fraud"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rows, err := f.log.List(ctx, tt.p, tt.filter)
			if err != nil {
				t.Fatal(err)
			}
			if got := objects(rows); got != tt.want {
				t.Errorf("List(%+v) = %s, want %s", tt.filter, got, tt.want)
			}
		})
	}
}

func TestListPages(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := t.Context()
	riskAdmin := &auth.Principal{Teams: []auth.Membership{member(f.riskID, "risk", auth.RoleAdmin)}}
	var pages []string
	before := int64(0)
	for range 10 {
		rows, err := f.log.List(ctx, riskAdmin, audit.Filter{BeforeID: before, Limit: 3})
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) == 0 {
			break
		}
		for i := 1; i < len(rows); i++ {
			if rows[i].ID >= rows[i-1].ID {
				t.Errorf("page ids %d then %d, want newest first", rows[i-1].ID, rows[i].ID)
			}
		}
		pages = append(pages, objects(rows))
		before = rows[len(rows)-1].ID
	}
	if got, want := strings.Join(pages, " | "), "scorer,fraud-prod,fraud-prod | fraud"; got != want {
		t.Errorf("pages = %q, want %q", got, want)
	}
	// A page before the oldest record is empty, not everything.
	rows, err := f.log.List(ctx, riskAdmin, audit.Filter{BeforeID: f.ids[0]})
	if err != nil || len(rows) != 0 {
		t.Errorf("List(before the first id) = %s, %v; want nothing", objects(rows), err)
	}
}

func TestRecordRow(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	rows, err := f.log.List(t.Context(), &auth.Principal{PlatformRole: auth.RolePlatformAdmin}, audit.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]audit.Row{}
	for _, r := range rows {
		byName[r.ObjectName+"/"+r.Action] = r
	}
	upd := byName["fraud-prod/endpoint.update"]
	if upd.Team != "risk" || upd.Actor != "bob" || upd.Via != "session" || upd.ObjectType != "endpoint" || upd.At.IsZero() {
		t.Errorf("update row = %+v, want team risk, actor bob via session, object endpoint, a time", upd)
	}
	var b, a map[string]int
	if err := json.Unmarshal(upd.Before, &b); err != nil || b["max_replicas"] != 2 {
		t.Errorf("before = %s, %v; want max_replicas 2", upd.Before, err)
	}
	if err := json.Unmarshal(upd.After, &a); err != nil || a["max_replicas"] != 8 {
		t.Errorf("after = %s, %v; want max_replicas 8", upd.After, err)
	}
	created := byName["fraud-prod/endpoint.create"]
	if created.Before != nil || created.After != nil {
		t.Errorf("create row before/after = %s / %s, want both absent", created.Before, created.After)
	}
	if key := byName["ranker-prod/endpoint.create"]; key.Via != "api-key mpk_0123456789ab" || key.Actor != "mpk_0123456789ab" {
		t.Errorf("key row via %q actor %q, want via \"api-key mpk_0123456789ab\" and the prefix as actor", key.Via, key.Actor)
	}
	if team := byName["fraud-ml/team.create"]; team.Team != "" {
		t.Errorf("platform-wide row team = %q, want empty", team.Team)
	}
}

func TestRecordUnmarshalable(t *testing.T) {
	t.Parallel()
	// Marshalling fails before any query, so no database is needed.
	err := audit.Record(t.Context(), db.New(nil), &auth.Principal{Name: "x"}, audit.Entry{Action: "x.y", ObjectType: "x", ObjectName: "x", After: make(chan int)})
	if err == nil {
		t.Errorf("Record(after a channel) error = nil, want a marshal error")
	}
}
