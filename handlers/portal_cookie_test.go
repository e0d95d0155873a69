package handlers

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"modelplane/db"
)

// TestPortalHostCookies checks that the portal's own cookies are __Host-
// cookies: Secure, Path=/ and no Domain, so a sibling subdomain or a plain
// http page on the same host cannot plant a team or a message.
func TestPortalHostCookies(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	u := portalSignIn(t, e, "risk-admin@example.com")

	switched := u.post("/team/switch", u.form("team", "risk"))
	if switched.StatusCode != http.StatusSeeOther {
		t.Fatalf("POST /team/switch = %d, want 303\n%s", switched.StatusCode, switched.Body)
	}
	flashed := u.post("/team/members", u.form("team", "risk", "email", "risk-viewer@example.com", "role", "viewer"))
	if flashed.StatusCode != http.StatusSeeOther {
		t.Fatalf("POST /team/members = %d, want 303\n%s", flashed.StatusCode, flashed.Body)
	}
	for _, c := range []struct {
		name string
		resp portalResponse
	}{{TeamCookie, switched}, {FlashCookie, flashed}} {
		if !strings.HasPrefix(c.name, "__Host-") {
			t.Errorf("cookie %q has no __Host- prefix", c.name)
		}
		var raw string
		for _, h := range c.resp.Header.Values("Set-Cookie") {
			if strings.HasPrefix(h, c.name+"=") {
				raw = h
			}
		}
		if raw == "" {
			t.Fatalf("no Set-Cookie for %s in %q", c.name, c.resp.Header.Values("Set-Cookie"))
		}
		for _, want := range []string{"Path=/", "Secure", "HttpOnly", "SameSite=Lax"} {
			if !strings.Contains(raw, want) {
				t.Errorf("%s = %q, want %s", c.name, raw, want)
			}
		}
		if strings.Contains(strings.ToLower(raw), "domain=") {
			t.Errorf("%s = %q has a Domain; __Host- cookies must not", c.name, raw)
		}
	}
	// The old names are not read any more: a planted mp_team picks nothing.
	page := u.get("/team", &http.Cookie{Name: "mp_team", Value: "search"})
	if got := page.doc(t).Find("h1").First().Text(); got != "Team risk" {
		t.Errorf("with a planted mp_team=search the team page shows %q, want Team risk", got)
	}
}

// TestPortalTeamFormsCarryTeam checks that the member and key forms act on
// the team they were rendered for, named in a hidden field, not on whatever
// the team cookie says when they are posted: a person who switched teams in
// another tab does not change the other team by submitting a stale form.
func TestPortalTeamFormsCarryTeam(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	ctx := context.Background()
	q := db.New(e.pool)
	rita, err := q.UserGetByEmail(ctx, "risk-admin@example.com")
	if err != nil {
		t.Fatal(err)
	}
	search, err := q.TeamGetByName(ctx, "search")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.TeamMemberUpsert(ctx, db.TeamMemberUpsertParams{TeamID: search.ID, UserID: rita.ID, Role: "admin"}); err != nil {
		t.Fatal(err)
	}
	u := portalSignIn(t, e, "risk-admin@example.com")
	riskCookie := &http.Cookie{Name: TeamCookie, Value: "risk"}
	searchCookie := &http.Cookie{Name: TeamCookie, Value: "search"}

	doc := u.get("/team", riskCookie).doc(t)
	for _, form := range []string{"form#member-form", "form#key-form"} {
		if got := doc.Find(form+` input[type="hidden"][name="team"]`).AttrOr("value", ""); got != "risk" {
			t.Errorf("%s carries team %q, want a hidden team=risk", form, got)
		}
	}

	// The stale member form (rendered for risk) is posted after a switch to search.
	post := func(path string, cookie *http.Cookie, pairs ...string) portalResponse {
		t.Helper()
		f := u.form(pairs...)
		return portalRequest(t, e, u.token, http.MethodPost, path, "application/x-www-form-urlencoded", []byte(f.Encode()), []*http.Cookie{cookie})
	}
	if r := post("/team/members", searchCookie, "team", "risk", "email", "risk-viewer@example.com", "role", "engineer"); r.StatusCode != http.StatusSeeOther {
		t.Fatalf("stale member form = %d, want 303\n%s", r.StatusCode, r.Body)
	}
	roleIn := func(team string) string {
		t.Helper()
		members, err := e.srv.Tenant.Members(ctx, system, team)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range members {
			if m.Email == "risk-viewer@example.com" {
				return string(m.Role)
			}
		}
		return ""
	}
	if got := roleIn("risk"); got != "engineer" {
		t.Errorf("risk-viewer's role in risk = %q, want engineer (the form's team)", got)
	}
	if got := roleIn("search"); got != "" {
		t.Errorf("risk-viewer joined search as %q: the stale cookie chose the team", got)
	}

	// The stale key form makes the key in the form's team.
	if r := post("/team/keys", searchCookie, "team", "risk", "name", "stale-form-key", "key_role", "viewer"); r.StatusCode != http.StatusOK {
		t.Fatalf("stale key form = %d, want 200\n%s", r.StatusCode, r.Body)
	}
	keys, err := e.srv.Tenant.Keys(ctx, system, 0, 500)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, k := range keys {
		if k.Name == "stale-form-key" {
			found = true
			if k.Team != "risk" {
				t.Errorf("stale key form made its key in %q, want risk", k.Team)
			}
		}
	}
	if !found {
		t.Errorf("the key form made no key")
	}

	// A form without a team, or for a team the person is not in, changes nothing.
	viewer := portalSignIn(t, e, "risk-viewer@example.com")
	for _, c := range []struct {
		name string
		u    *portalUser
		form []string
		want int
	}{
		{"no team field", u, []string{"email", "risk-engineer@example.com", "role", "viewer"}, http.StatusBadRequest},
		{"a team not theirs", viewer, []string{"team", "search", "email", "risk-engineer@example.com", "role", "viewer"}, http.StatusNotFound},
	} {
		f := c.u.form(c.form...)
		r := portalRequest(t, e, c.u.token, http.MethodPost, "/team/members", "application/x-www-form-urlencoded", []byte(f.Encode()), []*http.Cookie{riskCookie})
		if r.StatusCode != c.want {
			t.Errorf("%s: POST /team/members = %d, want %d", c.name, r.StatusCode, c.want)
		}
	}
	if got := roleIn("risk"); got != "engineer" {
		t.Errorf("a refused form changed risk-viewer to %q", got)
	}
}
