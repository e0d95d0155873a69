package handlers

import (
	"context"
	"net/http"
	"testing"

	"modelplane/auth"
	"modelplane/busapi"
	"modelplane/db"
	"modelplane/tenant"
)

// TestKeyStopsWhenCreatorLosesRole: keys a person made answer 401 on the
// API once that person leaves the key's team, is demoted below the key's
// role or loses the platform role that minted an org-wide key, and the
// outbox tells the gateways to delete them. The seeded keys, which have no
// creator, keep working throughout (they make the membership changes).
func TestKeyStopsWhenCreatorLosesRole(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	ctx := context.Background()
	q := db.New(e.pool)
	userKey := func(email string, req tenant.KeyRequest) (string, string) {
		t.Helper()
		u, err := q.UserGetByEmail(ctx, email)
		if err != nil {
			t.Fatal(err)
		}
		p, err := auth.LoadUser(ctx, q, u.ID, "session")
		if err != nil {
			t.Fatal(err)
		}
		req.Name = email + "-" + string(req.Role)
		raw, k, err := e.srv.Tenant.CreateKey(ctx, p, req)
		if err != nil {
			t.Fatal(err)
		}
		return raw, k.Prefix
	}
	status := func(key string) int {
		t.Helper()
		return e.call(t, key, http.MethodGet, "/models", nil).status
	}
	lastEntry := func(prefix string) string {
		t.Helper()
		var p string
		err := e.pool.QueryRow(ctx, "SELECT payload::text FROM outbox WHERE subject = $1 ORDER BY id DESC LIMIT 1",
			busapi.KVSubject(busapi.BucketKeys, prefix)).Scan(&p)
		if err != nil {
			t.Fatalf("outbox entry of %s: %v", prefix, err)
		}
		return p
	}
	admin := e.Keys["risk-admin"]
	ritaAdmin, ritaAdminP := userKey("risk-admin@example.com", tenant.KeyRequest{Team: "risk", Role: auth.RoleAdmin})
	ritaEng, ritaEngP := userKey("risk-admin@example.com", tenant.KeyRequest{Team: "risk", Role: auth.RoleEngineer})
	adaKey, adaKeyP := userKey("admin@example.com", tenant.KeyRequest{Role: auth.RolePlatformAdmin})
	for _, k := range []string{ritaAdmin, ritaEng, adaKey} {
		if got := status(k); got != http.StatusOK {
			t.Fatalf("GET /models with a fresh key = %d, want 200", got)
		}
	}

	// Ravi becomes a second admin, so that Rita can be demoted.
	for _, m := range []map[string]string{
		{"email": "risk-engineer@example.com", "role": "admin"},
		{"email": "risk-admin@example.com", "role": "engineer"},
	} {
		if r := e.call(t, admin, http.MethodPost, "/teams/risk/members", jsonPayload(m)); r.status != http.StatusCreated && r.status != http.StatusOK {
			t.Fatalf("POST /teams/risk/members %v = %d %s", m, r.status, r)
		}
	}
	if got := status(ritaAdmin); got != http.StatusUnauthorized {
		t.Errorf("admin key of a creator demoted to engineer: GET /models = %d, want 401", got)
	}
	if got := status(ritaEng); got != http.StatusOK {
		t.Errorf("engineer key of a creator demoted to engineer: GET /models = %d, want 200", got)
	}
	if got := lastEntry(ritaAdminP); got != "null" {
		t.Errorf("outbox entry of the admin key after the demotion = %s, want null (a delete)", got)
	}

	if r := e.call(t, admin, http.MethodDelete, "/teams/risk/members/risk-admin@example.com", nil); r.status != http.StatusNoContent {
		t.Fatalf("DELETE member = %d %s", r.status, r)
	}
	if got := status(ritaEng); got != http.StatusUnauthorized {
		t.Errorf("key of a creator removed from the team: GET /models = %d, want 401", got)
	}
	if got := lastEntry(ritaEngP); got != "null" {
		t.Errorf("outbox entry of the engineer key after the removal = %s, want null (a delete)", got)
	}

	ada, err := q.UserGetByEmail(ctx, "admin@example.com")
	if err != nil {
		t.Fatal(err)
	}
	if err := q.UserSetPlatformRole(ctx, db.UserSetPlatformRoleParams{ID: ada.ID}); err != nil {
		t.Fatal(err)
	}
	if got := status(adaKey); got != http.StatusUnauthorized {
		t.Errorf("platform admin key of a creator no longer platform admin: GET /models = %d, want 401", got)
	}
	if _, err := e.srv.Tenant.PublishKeys(ctx); err != nil {
		t.Fatal(err)
	}
	if got := lastEntry(adaKeyP); got != "null" {
		t.Errorf("outbox entry of the platform admin key after PublishKeys = %s, want null (a delete)", got)
	}
	if got := status(admin); got != http.StatusOK {
		t.Errorf("seeded key with no creator: GET /models = %d, want 200", got)
	}
}
