package handlers

import (
	"net/http"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
)

// TestPortalAddNodeForPlatformAdminsOnly: the fleet page's Add node button
// is a platform admin's; it shows the join token once with the command
// line that uses it, uncached, and each enrolled node gets a revoke button
// that ends its credentials. Nobody else sees or uses either.
func TestPortalAddNodeForPlatformAdminsOnly(t *testing.T) {
	t.Parallel()
	e := newTestEnvWith(t, envOptions{Deps: func(d *Deps, _ *pgxpool.Pool) { d.PublicURL = "https://cp.example.com" }})
	e.seedFleet(t)
	admin := portalSignIn(t, e, "admin@example.com")

	doc := admin.page("/fleet")
	if doc.Find("#enrollment form#add-node-form button#add-node").Length() != 1 {
		t.Fatal("the platform admin's fleet page has no Add node button")
	}
	if doc.Find("#join-token").Length() != 0 {
		t.Error("the fleet page shows a join token before one is made")
	}
	for _, email := range []string{"finance@example.com", "risk-admin@example.com"} {
		u := portalSignIn(t, e, email)
		r := u.get("/fleet")
		if r.StatusCode != http.StatusForbidden || strings.Contains(string(r.Body), "add-node") {
			t.Errorf("GET /fleet as %s = %d with Add node %v; want 403 without it", email, r.StatusCode, strings.Contains(string(r.Body), "add-node"))
		}
		if r := u.post("/fleet/join-tokens", u.form("node", "gpu-x", "host", "10.0.0.1")); r.StatusCode != http.StatusForbidden || strings.Contains(string(r.Body), "mpj_") {
			t.Errorf("POST /fleet/join-tokens as %s = %d; want 403 and no token", email, r.StatusCode)
		}
	}

	r := admin.post("/fleet/join-tokens", admin.form("node", "gpu-new-01", "host", "10.0.0.5", "port_first", "abc"))
	if r.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(string(r.Body), "must be a port number") {
		t.Errorf("a bad port = %d; want 422 naming the field", r.StatusCode)
	}
	r = admin.post("/fleet/join-tokens", admin.form("node", "gpu-new-01", "host", "10.0.0.5"))
	if r.StatusCode != http.StatusOK || !strings.Contains(r.Header.Get("Cache-Control"), "no-store") {
		t.Fatalf("Add node = %d (Cache-Control %q)\n%s", r.StatusCode, r.Header.Get("Cache-Control"), r.Body)
	}
	doc = r.doc(t)
	token := strings.TrimSpace(doc.Find("#join-token").Text())
	if !strings.HasPrefix(token, "mpj_") {
		t.Fatalf("join token shown %q", token)
	}
	if got, want := strings.TrimSpace(doc.Find("#join-command").Text()), "modelplane agent --join "+token+" --control-plane https://cp.example.com"; got != want {
		t.Errorf("command line %q, want %q", got, want)
	}
	if strings.Contains(string(admin.get("/fleet").Body), token) {
		t.Error("the join token shows again on the next visit")
	}

	if _, err := e.srv.Enrollment.Join(t.Context(), token, "10.0.0.5"); err != nil {
		t.Fatal(err)
	}
	row := admin.page("/fleet").Find(`#enrolled tr[data-node="gpu-new-01"]`)
	if row.Find("button.revoke-node").Length() != 1 {
		t.Fatal("the enrolled node has no revoke button")
	}
	risk := portalSignIn(t, e, "risk-admin@example.com")
	if r := risk.post("/fleet/gpu-new-01/revoke", risk.form()); r.StatusCode != http.StatusForbidden {
		t.Errorf("risk admin revokes a node = %d; want 403", r.StatusCode)
	}
	if r := admin.post("/fleet/gpu-new-01/revoke", admin.form()); r.StatusCode != http.StatusSeeOther {
		t.Fatalf("revoke = %d; want 303\n%s", r.StatusCode, r.Body)
	}
	row = admin.page("/fleet").Find(`#enrolled tr[data-node="gpu-new-01"]`)
	if row.Find("button.revoke-node").Length() != 0 || !strings.Contains(row.Text(), "revoked") {
		t.Errorf("after the revocation the row reads %q", row.Text())
	}
}
