package tenant_test

import (
	"errors"
	"testing"

	"modelplane/auth"
	"modelplane/db"
	"modelplane/tenant"
)

// TestMemberAmbiguousEmail checks that an email two users share (signed in
// through two issuers, or an address that moved) names nobody: adding or
// removing a member by it is an error, never the user who signed in first.
func TestMemberAmbiguousEmail(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := t.Context()
	q := db.New(f.pool)
	// A second user, from another issuer, with cat's email.
	if _, err := q.UserUpsert(ctx, db.UserUpsertParams{Issuer: "https://other-idp.example", Subject: "cat", Email: "cat@example.com", Name: "Other Cat"}); err != nil {
		t.Fatal(err)
	}
	_, err := f.svc.SetMember(ctx, f.ann, "risk", "cat@example.com", auth.RoleViewer)
	if !errors.Is(err, tenant.ErrAmbiguousEmail) {
		t.Errorf("SetMember with a shared email: err = %v, want ErrAmbiguousEmail", err)
	}
	if got := fields(err); len(got) != 1 || got[0] != "email" {
		t.Errorf("SetMember with a shared email: fields %v, want [email]", got)
	}
	if _, ok := f.roles(t, f.risk.ID)["cat@example.com"]; ok {
		t.Errorf("a user with the shared email joined risk")
	}

	// Removing goes by the team's own members: one member with the email is
	// unambiguous even when another user outside the team shares it...
	if _, err := q.UserUpsert(ctx, db.UserUpsertParams{Issuer: "https://other-idp.example", Subject: "bob", Email: "bob@example.com", Name: "Other Bob"}); err != nil {
		t.Fatal(err)
	}
	if err := f.svc.RemoveMember(ctx, f.ann, "risk", "bob@example.com"); err != nil {
		t.Errorf("RemoveMember of the one member with bob's email: %v", err)
	}
	// ...and two members with it are an error.
	other, err := q.UserUpsert(ctx, db.UserUpsertParams{Issuer: "https://other-idp.example", Subject: "val", Email: "val@example.com", Name: "Other Val"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.TeamMemberUpsert(ctx, db.TeamMemberUpsertParams{TeamID: f.risk.ID, UserID: other.ID, Role: "viewer"}); err != nil {
		t.Fatal(err)
	}
	if err := f.svc.RemoveMember(ctx, f.ann, "risk", "val@example.com"); !errors.Is(err, tenant.ErrAmbiguousEmail) {
		t.Errorf("RemoveMember with two members sharing an email: err = %v, want ErrAmbiguousEmail", err)
	}
	n := 0
	for _, m := range mustMembers(t, f, "risk") {
		if m.Email == "val@example.com" {
			n++
		}
	}
	if n != 2 {
		t.Errorf("members with val's email after a refused removal = %d, want 2", n)
	}
}

func mustMembers(t *testing.T, f *fixture, team string) []tenant.Member {
	t.Helper()
	ms, err := f.svc.Members(t.Context(), f.ann, team)
	if err != nil {
		t.Fatal(err)
	}
	return ms
}
