package auth

import (
	"encoding/json"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"modelplane/busapi"
	"modelplane/db"
	"modelplane/internal/pgtest"
)

// identityRows returns the identity outbox rows after id, by key.
func identityRows(t *testing.T, pool *pgxpool.Pool, after int64) (map[string]string, int64) {
	t.Helper()
	rows, err := pool.Query(t.Context(), "SELECT id, subject, payload FROM outbox WHERE id > $1 AND subject LIKE '$KV.mp_identity.%' ORDER BY id", after)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]string{}
	last := after
	for rows.Next() {
		var id int64
		var subject string
		var payload []byte
		if err := rows.Scan(&id, &subject, &payload); err != nil {
			t.Fatal(err)
		}
		_, key, _ := busapi.KVKey(subject)
		out[key] = string(payload)
		last = id
	}
	return out, last
}

// TestIdentityPublisher: the first Publish writes the issuer's keys and
// every member's entry; an unchanged state writes nothing; a changed
// membership rewrites that user's entry; a user left with no membership,
// and a stale key found in the bucket, are deleted.
func TestIdentityPublisher(t *testing.T) {
	t.Parallel()
	idp, pool := startIdP(t), pgtest.New(t)
	rp := newRP(t, idp, pool, nil)
	ctx := t.Context()
	q := db.New(pool)
	team, err := q.TeamCreate(ctx, db.TeamCreateParams{Name: "risk"})
	if err != nil {
		t.Fatal(err)
	}
	iss := idp.Issuer()
	users := map[string]int64{}
	for _, sub := range []string{"alice", "bob", "carol"} {
		if err := q.UserCreateIfMissing(ctx, db.UserCreateIfMissingParams{Issuer: iss, Subject: sub, Email: sub + "@example.com"}); err != nil {
			t.Fatal(err)
		}
		u, err := q.UserGetByIdentity(ctx, db.UserGetByIdentityParams{Issuer: iss, Subject: sub})
		if err != nil {
			t.Fatal(err)
		}
		users[sub] = u.ID
	}
	for sub, role := range map[string]string{"alice": "engineer", "bob": "viewer"} {
		if _, err := q.TeamMemberUpsert(ctx, db.TeamMemberUpsertParams{TeamID: team.ID, UserID: users[sub], Role: role}); err != nil {
			t.Fatal(err)
		}
	}
	pub := rp.IdentityPublisher(pool)
	stale := busapi.IdentityUserKey(iss, "gone")
	pub.Forget([]string{stale})
	n, err := pub.Publish(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got, last := identityRows(t, pool, 0)
	if n != 4 || len(got) != 4 {
		t.Fatalf("first publish wrote %d: %v; want the keys, alice, bob and the stale key's deletion", n, got)
	}
	var oe busapi.OIDCEntry
	if err := json.Unmarshal([]byte(got[busapi.IdentityOIDCKey]), &oe); err != nil {
		t.Fatal(err)
	}
	var set struct {
		Keys []map[string]any `json:"keys"`
	}
	if err := json.Unmarshal(oe.JWKS, &set); err != nil || oe.Issuer != iss || oe.Audience != idp.ClientID() || len(set.Keys) == 0 {
		t.Errorf("oidc entry = %+v (%v), want issuer %s, audience %s and the signing keys", oe, err, iss, idp.ClientID())
	}
	if a := member(t, got[busapi.IdentityUserKey(iss, "alice")]); len(a.Teams) != 1 || a.Teams[0] != (busapi.MemberTeam{Team: "risk", Role: "engineer"}) {
		t.Errorf("alice = %+v, want engineer of risk", a)
	}
	if got[stale] != "null" {
		t.Errorf("stale key = %q, want null (deleted)", got[stale])
	}
	if _, ok := got[busapi.IdentityUserKey(iss, "carol")]; ok {
		t.Errorf("carol, in no team, was published")
	}

	if n, err := pub.Publish(ctx); err != nil || n != 0 {
		t.Errorf("unchanged publish wrote %d (%v), want 0", n, err)
	}

	if _, err := q.TeamMemberUpsert(ctx, db.TeamMemberUpsertParams{TeamID: team.ID, UserID: users["bob"], Role: "admin"}); err != nil {
		t.Fatal(err)
	}
	if _, err := q.TeamMemberDelete(ctx, db.TeamMemberDeleteParams{TeamID: team.ID, UserID: users["alice"]}); err != nil {
		t.Fatal(err)
	}
	if _, err := pub.Publish(ctx); err != nil {
		t.Fatal(err)
	}
	got, _ = identityRows(t, pool, last)
	bob := got[busapi.IdentityUserKey(iss, "bob")]
	if b := member(t, bob); len(got) != 2 || got[busapi.IdentityUserKey(iss, "alice")] != "null" || len(b.Teams) != 1 || b.Teams[0].Role != "admin" {
		t.Errorf("after the changes wrote %v, want alice deleted and bob an admin", got)
	}
}

func member(t *testing.T, payload string) busapi.MemberEntry {
	t.Helper()
	var m busapi.MemberEntry
	if err := json.Unmarshal([]byte(payload), &m); err != nil {
		t.Fatalf("member entry %q: %v", payload, err)
	}
	return m
}

// TestIdentityPublisherNewTerm: control plane A publishes alice as an
// engineer, loses the lease, and B publishes her demotion to viewer; when
// the row is back to engineer and A leads again, A's first pass of the new
// term rewrites alice (its memory from the old term equals the row, so
// without BeginTerm it would write nothing and B's entry would stay).
func TestIdentityPublisherNewTerm(t *testing.T) {
	t.Parallel()
	idp, pool := startIdP(t), pgtest.New(t)
	rp := newRP(t, idp, pool, nil)
	ctx := t.Context()
	q := db.New(pool)
	team, err := q.TeamCreate(ctx, db.TeamCreateParams{Name: "risk"})
	if err != nil {
		t.Fatal(err)
	}
	iss := idp.Issuer()
	if err := q.UserCreateIfMissing(ctx, db.UserCreateIfMissingParams{Issuer: iss, Subject: "alice", Email: "alice@example.com"}); err != nil {
		t.Fatal(err)
	}
	u, err := q.UserGetByIdentity(ctx, db.UserGetByIdentityParams{Issuer: iss, Subject: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	setRole := func(role string) {
		t.Helper()
		if _, err := q.TeamMemberUpsert(ctx, db.TeamMemberUpsertParams{TeamID: team.ID, UserID: u.ID, Role: role}); err != nil {
			t.Fatal(err)
		}
	}
	alice := busapi.IdentityUserKey(iss, "alice")
	setRole("engineer")
	a, b := rp.IdentityPublisher(pool), rp.IdentityPublisher(pool)
	a.BeginTerm(nil)
	if _, err := a.Publish(ctx); err != nil {
		t.Fatal(err)
	}
	setRole("viewer")
	b.BeginTerm([]string{busapi.IdentityOIDCKey, alice})
	if _, err := b.Publish(ctx); err != nil {
		t.Fatal(err)
	}
	_, last := identityRows(t, pool, 0)
	setRole("engineer")
	a.BeginTerm([]string{busapi.IdentityOIDCKey, alice})
	if _, err := a.Publish(ctx); err != nil {
		t.Fatal(err)
	}
	got, _ := identityRows(t, pool, last)
	if m := member(t, got[alice]); len(m.Teams) != 1 || m.Teams[0].Role != "engineer" {
		t.Fatalf("A's first pass of its new term wrote %v, want alice rewritten as an engineer", got)
	}
}
