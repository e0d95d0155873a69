package handlers

import (
	"context"
	"net/http"
	"testing"
	"time"

	"modelplane/auth/devidp"
	"modelplane/db"
)

// TestIdentityByID checks that who did something is recorded by user or key
// id, not by email or key prefix: two people who share an email do not share
// idempotency records (one would read the other's stored answers), and the
// audit log and a model's creator name the user or key that acted.
func TestIdentityByID(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	ctx := context.Background()
	q := db.New(e.pool)
	risk, err := q.TeamGetByName(ctx, "risk")
	if err != nil {
		t.Fatal(err)
	}
	// Two users of the IdP, different subjects, the same verified email.
	token := func(subject string) (string, int64) {
		t.Helper()
		u := devidp.User{Subject: subject, Email: "shared@example.com", Name: subject}
		tok, err := e.idp.Sign(e.idp.TokenClaims(u, time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		if r := e.call(t, tok, http.MethodGet, "/me", nil); r.status != http.StatusOK {
			t.Fatalf("GET /me as %s = %d %s", subject, r.status, r)
		}
		row, err := q.UserGetByIdentity(ctx, db.UserGetByIdentityParams{Issuer: e.idp.Issuer(), Subject: subject})
		if err != nil {
			t.Fatal(err)
		}
		return tok, row.ID
	}
	first, firstID := token("shared-one")
	second, _ := token("shared-two")
	if _, err := q.TeamMemberUpsert(ctx, db.TeamMemberUpsertParams{TeamID: risk.ID, UserID: firstID, Role: "engineer"}); err != nil {
		t.Fatal(err)
	}
	body := map[string]any{"team": "risk", "name": "shared-email-model", "task": "classification"}
	r1 := e.call(t, first, http.MethodPost, "/models", jsonPayload(body), "Idempotency-Key", "shared-key")
	if r1.status != http.StatusCreated {
		t.Fatalf("first user's POST /models = %d %s", r1.status, r1)
	}
	r2 := e.call(t, second, http.MethodPost, "/models", jsonPayload(body), "Idempotency-Key", "shared-key")
	if r2.header.Get("Idempotent-Replayed") == "true" || r2.status == http.StatusCreated {
		t.Errorf("a second user with the same email got the first's stored answer: %d %s", r2.status, r2)
	}

	var actorUser, actorKey, createdUser, createdKey *int64
	row := func(model string) {
		t.Helper()
		if err := e.pool.QueryRow(ctx, `SELECT a.actor_user_id, a.actor_key_id, m.created_by_user_id, m.created_by_key_id
			FROM audit_log a JOIN models m ON a.object_name = m.name
			WHERE a.action = 'model.create' AND m.name = $1`, model).Scan(&actorUser, &actorKey, &createdUser, &createdKey); err != nil {
			t.Fatalf("audit and model rows of %s: %v", model, err)
		}
	}
	row("shared-email-model")
	if actorUser == nil || *actorUser != firstID || actorKey != nil {
		t.Errorf("audit actor of a token user's create = user %v key %v, want user %d", actorUser, actorKey, firstID)
	}
	if createdUser == nil || *createdUser != firstID || createdKey != nil {
		t.Errorf("created_by of a token user's model = user %v key %v, want user %d", createdUser, createdKey, firstID)
	}

	// Through an API key: the key's id.
	if r := e.call(t, e.Keys["risk-engineer"], http.MethodPost, "/models", jsonPayload(map[string]any{"team": "risk", "name": "key-model", "task": "classification"})); r.status != http.StatusCreated {
		t.Fatalf("POST /models with a key = %d %s", r.status, r)
	}
	var keyID int64
	if err := e.pool.QueryRow(ctx, `SELECT id FROM api_keys WHERE name = 'risk-engineer'`).Scan(&keyID); err != nil {
		t.Fatal(err)
	}
	row("key-model")
	if actorKey == nil || *actorKey != keyID {
		t.Errorf("audit actor of a key's create = key %v, want key %d", actorKey, keyID)
	}
	if createdKey == nil || *createdKey != keyID {
		t.Errorf("created_by of a key's model = key %v, want key %d", createdKey, keyID)
	}
}
