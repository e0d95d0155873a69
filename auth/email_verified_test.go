package auth

import (
	"testing"
	"time"

	"modelplane/auth/devidp"
	"modelplane/db"
	"modelplane/internal/pgtest"
)

// TestOIDCEmailVerified checks that a user's email is taken from a token
// only when the IdP vouches for it (email_verified true): an IdP that lets
// people type any address would otherwise let one claim a colleague's email,
// and with it whatever is looked up by email (adding members).
func TestOIDCEmailVerified(t *testing.T) {
	t.Parallel()
	idp, pool := startIdP(t), pgtest.New(t)
	rp := newRP(t, idp, pool, nil)
	cases := []struct {
		name     string
		verified any // nil: claim absent
		want     bool
	}{
		{"verified", true, true},
		{"verified-as-string", "true", true},
		{"unverified", false, false},
		{"unverified-as-string", "false", false},
		{"absent", nil, false},
	}
	emailOf := func(t *testing.T, subject string) string {
		t.Helper()
		u, err := db.New(pool).UserGetByIdentity(t.Context(), db.UserGetByIdentityParams{Issuer: idp.Issuer(), Subject: subject})
		if err != nil {
			t.Fatalf("user %s: %v", subject, err)
		}
		return u.Email
	}
	for _, tc := range cases {
		t.Run("login-"+tc.name, func(t *testing.T) {
			t.Parallel()
			email := "login-" + tc.name + "@example.com"
			idp.AddUser(devidp.User{Subject: "login-" + tc.name, Email: email, Name: tc.name, Claims: map[string]any{"email_verified": tc.verified}})
			state, code := login(t, rp, email)
			if _, _, err := rp.Finish(t.Context(), state, code); err != nil {
				t.Fatalf("Finish: %v", err)
			}
			want := ""
			if tc.want {
				want = email
			}
			if got := emailOf(t, "login-"+tc.name); got != want {
				t.Errorf("email after sign-in with email_verified=%v = %q, want %q", tc.verified, got, want)
			}
		})
		t.Run("token-"+tc.name, func(t *testing.T) {
			t.Parallel()
			u := devidp.User{Subject: "token-" + tc.name, Email: "token-" + tc.name + "@example.com", Name: tc.name}
			c := idp.TokenClaims(u, time.Hour)
			if tc.verified == nil {
				delete(c, "email_verified")
			} else {
				c["email_verified"] = tc.verified
			}
			tok, err := idp.Sign(c)
			if err != nil {
				t.Fatal(err)
			}
			p, err := rp.AuthenticateToken(t.Context(), tok)
			if err != nil {
				t.Fatalf("AuthenticateToken: %v", err)
			}
			want := ""
			if tc.want {
				want = u.Email
			}
			if got := emailOf(t, u.Subject); got != want {
				t.Errorf("email after a token with email_verified=%v = %q, want %q", tc.verified, got, want)
			}
			if tc.want && p.Name != u.Email {
				t.Errorf("principal name = %q, want %q", p.Name, u.Email)
			}
		})
	}
}
