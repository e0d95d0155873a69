package tenant_test

import (
	"os"
	"regexp"
	"testing"

	"modelplane/auth"
	"modelplane/db"
	"modelplane/tenant"
)

// lastEntry is the newest outbox payload of a key's gateway entry: "null"
// when the gateways were told to delete it, "" when nothing was written.
func (f *fixture) lastEntry(t *testing.T, prefix string) string {
	t.Helper()
	rows := f.outboxRows(t, prefix)
	if len(rows) == 0 {
		return ""
	}
	return rows[len(rows)-1]
}

// key creates a key as p and returns it in clear with its prefix.
func (f *fixture) key(t *testing.T, p *auth.Principal, team string, role auth.Role) (string, string) {
	t.Helper()
	raw, k, err := f.svc.CreateKey(t.Context(), p, tenant.KeyRequest{Name: string(role), Team: team, Role: role})
	if err != nil {
		t.Fatalf("CreateKey(%s %s): %v", team, role, err)
	}
	return raw, k.Prefix
}

// works reports whether a key authenticates.
func (f *fixture) works(t *testing.T, raw string) bool {
	t.Helper()
	_, err := f.authenticate(t.Context(), raw)
	return err == nil
}

// TestTeamKeyFollowsItsCreator: a team key works only while its creator
// could still mint it, a member of the key's team with a role at least the
// key's: removing or demoting the creator stops it at the control plane and,
// in the same transaction, deletes its gateway entry; restoring the role
// brings it back. Other people's keys, and keys with no creator, are not
// touched.
func TestTeamKeyFollowsItsCreator(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := t.Context()
	// bob becomes a second admin, so that ann can be demoted.
	if _, err := f.svc.SetMember(ctx, f.root, "risk", "bob@example.com", auth.RoleAdmin); err != nil {
		t.Fatal(err)
	}
	bobAdmin := &auth.Principal{UserID: f.bob.UserID, Name: f.bob.Name, Via: "session", Teams: []auth.Membership{{TeamID: f.risk.ID, Team: "risk", Role: auth.RoleAdmin}}}
	annAdmin, annAdminP := f.key(t, f.ann, "risk", auth.RoleAdmin)
	annEng, annEngP := f.key(t, f.ann, "risk", auth.RoleEngineer)
	annView, annViewP := f.key(t, f.ann, "risk", auth.RoleViewer)
	bobKey, bobKeyP := f.key(t, bobAdmin, "risk", auth.RoleAdmin)
	ownerless, ownerlessP := f.key(t, f.root, "risk", auth.RoleAdmin)
	samKey, samKeyP := f.key(t, f.sam, "search", auth.RoleAdmin)
	// ann is also a member of search, where her key is not affected by
	// what happens to her in risk.
	if _, err := f.svc.SetMember(ctx, f.sam, "search", "ann@example.com", auth.RoleAdmin); err != nil {
		t.Fatal(err)
	}
	annInSearch := &auth.Principal{UserID: f.ann.UserID, Name: f.ann.Name, Via: "session", Teams: []auth.Membership{{TeamID: f.search.ID, Team: "search", Role: auth.RoleAdmin}}}
	annSearch, annSearchP := f.key(t, annInSearch, "search", auth.RoleViewer)

	type want struct {
		raw, prefix string
		works       bool
		entry       bool // the newest gateway entry is the key (false: a delete)
	}
	check := func(step string, wants []want) {
		t.Helper()
		for _, w := range wants {
			if got := f.works(t, w.raw); got != w.works {
				t.Errorf("%s: key %s authenticates = %v, want %v", step, w.prefix, got, w.works)
			}
			last := f.lastEntry(t, w.prefix)
			if w.entry && (last == "" || last == "null") {
				t.Errorf("%s: key %s newest gateway entry = %q, want the key", step, w.prefix, last)
			}
			if !w.entry && last != "null" {
				t.Errorf("%s: key %s newest gateway entry = %q, want a delete (null)", step, w.prefix, last)
			}
		}
	}
	others := []want{{bobKey, bobKeyP, true, true}, {ownerless, ownerlessP, true, true}, {samKey, samKeyP, true, true}, {annSearch, annSearchP, true, true}}
	othersRows := map[string]int{}
	for _, w := range others {
		othersRows[w.prefix] = len(f.outboxRows(t, w.prefix))
	}

	if _, err := f.svc.SetMember(ctx, bobAdmin, "risk", "ann@example.com", auth.RoleEngineer); err != nil {
		t.Fatal(err)
	}
	check("ann demoted to engineer", append([]want{
		{annAdmin, annAdminP, false, false}, {annEng, annEngP, true, true}, {annView, annViewP, true, true},
	}, others...))

	if _, err := f.svc.SetMember(ctx, bobAdmin, "risk", "ann@example.com", auth.RoleViewer); err != nil {
		t.Fatal(err)
	}
	check("ann demoted to viewer", append([]want{
		{annAdmin, annAdminP, false, false}, {annEng, annEngP, false, false}, {annView, annViewP, true, true},
	}, others...))

	if err := f.svc.RemoveMember(ctx, bobAdmin, "risk", "ann@example.com"); err != nil {
		t.Fatal(err)
	}
	check("ann removed from risk", append([]want{
		{annAdmin, annAdminP, false, false}, {annEng, annEngP, false, false}, {annView, annViewP, false, false},
	}, others...))
	for _, w := range others {
		if n := len(f.outboxRows(t, w.prefix)); n != othersRows[w.prefix] {
			t.Errorf("key %s of someone else: %d outbox rows after ann's changes, want %d (untouched)", w.prefix, n, othersRows[w.prefix])
		}
	}

	if _, err := f.svc.SetMember(ctx, bobAdmin, "risk", "ann@example.com", auth.RoleAdmin); err != nil {
		t.Fatal(err)
	}
	check("ann back as admin", append([]want{
		{annAdmin, annAdminP, true, true}, {annEng, annEngP, true, true}, {annView, annViewP, true, true},
	}, others...))
	if e := entryOf(t, f.lastEntry(t, annAdminP)); e.Prefix != annAdminP || e.SHA256 != digest(annAdmin) || e.Team != "risk" || e.Role != "admin" {
		t.Errorf("republished entry = %+v, want ann's admin key of risk", e)
	}
}

// TestOrgKeyFollowsItsCreator: an org-wide key, and a team key a platform
// admin made outside their own teams, work only while the creator holds a
// platform role that could mint them (a finance key: finance or platform
// admin). Platform roles change in SQL (operations.md), so the control plane
// refuses such a key at once, and PublishKeys deletes its gateway entry.
func TestOrgKeyFollowsItsCreator(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := t.Context()
	q := db.New(f.pool)
	u, err := q.UserGetByEmail(ctx, "cat@example.com")
	if err != nil {
		t.Fatal(err)
	}
	setRole := func(role string) {
		t.Helper()
		var r *string
		if role != "" {
			r = &role
		}
		if err := q.UserSetPlatformRole(ctx, db.UserSetPlatformRoleParams{ID: u.ID, PlatformRole: r}); err != nil {
			t.Fatal(err)
		}
	}
	setRole("platform_admin")
	cat := &auth.Principal{UserID: u.ID, Name: "cat@example.com", Via: "session", PlatformRole: auth.RolePlatformAdmin}
	admin, adminP := f.key(t, cat, "", auth.RolePlatformAdmin)
	finance, financeP := f.key(t, cat, "", auth.RoleFinance)
	team, teamP := f.key(t, cat, "search", auth.RoleAdmin)
	ownerless, ownerlessP := f.key(t, f.root, "", auth.RolePlatformAdmin)

	for _, step := range []struct {
		role                    string
		admin, finance, team    bool
		wantPublished, wantNull []string
	}{
		{role: "finance", admin: false, finance: true, team: false, wantPublished: []string{financeP, ownerlessP}, wantNull: []string{adminP, teamP}},
		{role: "", admin: false, finance: false, team: false, wantPublished: []string{ownerlessP}, wantNull: []string{adminP, financeP, teamP}},
		{role: "platform_admin", admin: true, finance: true, team: true, wantPublished: []string{adminP, financeP, teamP, ownerlessP}},
	} {
		setRole(step.role)
		for _, k := range []struct {
			name, raw string
			want      bool
		}{{"platform_admin key", admin, step.admin}, {"finance key", finance, step.finance}, {"team key", team, step.team}, {"ownerless key", ownerless, true}} {
			if got := f.works(t, k.raw); got != k.want {
				t.Errorf("creator's platform role %q: %s authenticates = %v, want %v", step.role, k.name, got, k.want)
			}
		}
		if _, err := f.svc.PublishKeys(ctx); err != nil {
			t.Fatal(err)
		}
		for _, p := range step.wantPublished {
			if last := f.lastEntry(t, p); last == "" || last == "null" {
				t.Errorf("creator's platform role %q: key %s newest gateway entry after PublishKeys = %q, want the key", step.role, p, last)
			}
		}
		for _, p := range step.wantNull {
			if last := f.lastEntry(t, p); last != "null" {
				t.Errorf("creator's platform role %q: key %s newest gateway entry after PublishKeys = %q, want a delete (null)", step.role, p, last)
			}
		}
	}
}

// TestCreatorHoldsIsOneRule: the rule is written in each key query that
// returns creator_holds (sqlc has no shared fragments); authentication and
// the gateways' copy must apply the same one, so every copy must be the
// same text.
func TestCreatorHoldsIsOneRule(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../queries/api_keys.sql")
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`(?s)\(k\.created_by IS NULL.*?AS creator_holds`)
	copies := re.FindAllString(string(b), -1)
	if len(copies) != 3 {
		t.Fatalf("creator_holds copies in queries/api_keys.sql = %d, want 3 (APIKeyGetByPrefix, APIKeyListActive, APIKeyListActiveByCreator)", len(copies))
	}
	for i, c := range copies[1:] {
		if c != copies[0] {
			t.Errorf("creator_holds copy %d differs from the first:\n%s\nwant\n%s", i+2, c, copies[0])
		}
	}
}
