package auth

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/coder/quartz"
	"github.com/jackc/pgx/v5/pgxpool"

	"modelplane/auth/devidp"
	"modelplane/db"
	"modelplane/internal/pgtest"
)

// testRedirect is the RP's callback. Nothing listens there: the test client
// stops at the IdP's redirect and reads state and code from it.
const testRedirect = "http://127.0.0.1:1/auth/callback"

// newClock is a hand-moved clock at t.
func newClock(tb testing.TB, t time.Time) *quartz.Mock {
	clk := quartz.NewMock(tb)
	clk.Set(t)
	return clk
}

func startIdP(t *testing.T) *devidp.IdP {
	t.Helper()
	idp, err := devidp.Start(devidp.Config{RedirectURLs: []string{testRedirect}})
	if err != nil {
		t.Fatalf("start idp: %v", err)
	}
	t.Cleanup(func() { idp.Close() })
	return idp
}

// newRP is a relying party of idp on clock (the real one when nil).
func newRP(t *testing.T, idp *devidp.IdP, pool *pgxpool.Pool, clock quartz.Clock) *OIDC {
	t.Helper()
	rp, err := NewOIDC(t.Context(), OIDCConfig{
		Issuer:       idp.Issuer(),
		ClientID:     idp.ClientID(),
		ClientSecret: idp.ClientSecret(),
		RedirectURL:  testRedirect,
	}, pool, clock)
	if err != nil {
		t.Fatalf("NewOIDC: %v", err)
	}
	return rp
}

// authorize plays the browser at the IdP: it follows authURL and returns the
// state and code of the redirect back to the RP.
func authorize(t *testing.T, authURL string) (state, code string) {
	t.Helper()
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Get(authURL)
	if err != nil {
		t.Fatalf("authorize: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusFound {
		t.Fatalf("authorize status = %d, want %d", resp.StatusCode, http.StatusFound)
	}
	loc, err := url.Parse(resp.Header.Get("Location"))
	if err != nil {
		t.Fatalf("authorize location: %v", err)
	}
	if got := loc.Scheme + "://" + loc.Host + loc.Path; got != testRedirect {
		t.Fatalf("redirected to %q, want %q", got, testRedirect)
	}
	return loc.Query().Get("state"), loc.Query().Get("code")
}

// login begins a sign-in as email and returns the callback's state and code.
func login(t *testing.T, rp *OIDC, email string) (state, code string) {
	t.Helper()
	authURL, err := rp.BeginHint(t.Context(), "/endpoints?team=risk", email)
	if err != nil {
		t.Fatalf("BeginHint: %v", err)
	}
	return authorize(t, authURL)
}

func countUsers(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(t.Context(), "SELECT count(*) FROM users").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestOIDCLogin(t *testing.T) {
	t.Parallel()
	idp, pool := startIdP(t), pgtest.New(t)
	rp := newRP(t, idp, pool, nil)
	ctx := t.Context()

	authURL, err := rp.Begin(ctx, "/endpoints?team=risk")
	if err != nil {
		t.Fatalf("Begin: %v", err)
	}
	u, _ := url.Parse(authURL)
	for _, p := range []string{"state", "nonce", "code_challenge"} {
		if u.Query().Get(p) == "" {
			t.Errorf("authorize URL has no %s: %s", p, authURL)
		}
	}
	if got := u.Query().Get("code_challenge_method"); got != "S256" {
		t.Errorf("code_challenge_method = %q, want S256", got)
	}

	// The browser binding the handlers check before Finish.
	if c := LoginCookieFor(authURL); c.Valid() != nil || !ValidCSRF(c.Value, u.Query().Get("state")) || c.Name != LoginCookie {
		t.Errorf("LoginCookieFor = %+v, want a valid %s cookie carrying the state", c, LoginCookie)
	}
	if c := ClearLoginCookie(); c.Name != LoginCookie || c.MaxAge >= 0 {
		t.Errorf("ClearLoginCookie = %+v, want %s with MaxAge < 0", c, LoginCookie)
	}

	state, code := login(t, rp, "risk-engineer@example.com")
	uid, returnTo, err := rp.Finish(ctx, state, code)
	if err != nil {
		t.Fatalf("Finish: %v", err)
	}
	if returnTo != "/endpoints?team=risk" {
		t.Errorf("returnTo = %q, want %q", returnTo, "/endpoints?team=risk")
	}
	user, err := db.New(pool).UserGetByIdentity(ctx, db.UserGetByIdentityParams{Issuer: idp.Issuer(), Subject: "demo-risk-engineer"})
	if err != nil {
		t.Fatalf("user by iss+sub: %v", err)
	}
	if user.ID != uid || user.Email != "risk-engineer@example.com" || user.Name != "Ravi Engineer" {
		t.Errorf("user = %d %q %q, want %d %q %q", user.ID, user.Email, user.Name, uid, "risk-engineer@example.com", "Ravi Engineer")
	}

	// Signing in again finds the same user.
	state, code = login(t, rp, "risk-engineer@example.com")
	again, _, err := rp.Finish(ctx, state, code)
	if err != nil {
		t.Fatalf("second Finish: %v", err)
	}
	if again != uid {
		t.Errorf("second login user = %d, want %d", again, uid)
	}
	if n := countUsers(t, pool); n != 1 {
		t.Errorf("users = %d, want 1", n)
	}
}

func TestLocalPath(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"/endpoints", "/endpoints"},
		{"/endpoints?team=risk#x", "/endpoints?team=risk#x"},
		{"", "/"},
		{"endpoints", "/"},
		{"//evil.example/", "/"},
		{"/\\evil.example/", "/"},
		{"https://evil.example/", "/"},
		{"javascript:alert(1)", "/"},
		{"/a\r\nSet-Cookie: x=y", "/"},
	} {
		if got := LocalPath(tc.in); got != tc.want {
			t.Errorf("LocalPath(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestOIDCFinishBadState(t *testing.T) {
	t.Parallel()
	idp, pool := startIdP(t), pgtest.New(t)
	rp := newRP(t, idp, pool, nil)
	ctx := t.Context()
	state, code := login(t, rp, "admin@example.com")

	for _, bad := range []string{"", "unknown", state + "x"} {
		if _, _, err := rp.Finish(ctx, bad, code); !errors.Is(err, ErrLoginFailed) {
			t.Errorf("Finish(state %q) error = %v, want ErrLoginFailed", bad, err)
		}
	}
	if _, _, err := rp.Finish(ctx, state, ""); !errors.Is(err, ErrLoginFailed) {
		t.Errorf("Finish(no code) error = %v, want ErrLoginFailed", err)
	}
	if n := countUsers(t, pool); n != 0 {
		t.Errorf("users after failed logins = %d, want 0", n)
	}
}

func TestOIDCFinishReplay(t *testing.T) {
	t.Parallel()
	idp, pool := startIdP(t), pgtest.New(t)
	rp := newRP(t, idp, pool, nil)
	ctx := t.Context()
	state, code := login(t, rp, "admin@example.com")

	if _, _, err := rp.Finish(ctx, state, code); err != nil {
		t.Fatalf("first Finish: %v", err)
	}
	if _, _, err := rp.Finish(ctx, state, code); !errors.Is(err, ErrLoginFailed) {
		t.Errorf("replayed Finish error = %v, want ErrLoginFailed", err)
	}
}

// tamperLogin changes the stored login row, as an attacker who swapped the
// callback's ID token or code would make it not match.
func tamperLogin(t *testing.T, pool *pgxpool.Pool, state, column string) {
	t.Helper()
	tag, err := pool.Exec(t.Context(), "UPDATE oidc_logins SET "+column+" = 'tampered-value-that-is-long-enough-for-pkce-xxxxxxxxx' WHERE state = $1", state)
	if err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("tamper %s: %v, %d rows", column, err, tag.RowsAffected())
	}
}

func TestOIDCFinishWrongNonce(t *testing.T) {
	t.Parallel()
	idp, pool := startIdP(t), pgtest.New(t)
	rp := newRP(t, idp, pool, nil)
	state, code := login(t, rp, "admin@example.com")
	tamperLogin(t, pool, state, "nonce")

	_, _, err := rp.Finish(t.Context(), state, code)
	if !errors.Is(err, ErrLoginFailed) || !strings.Contains(err.Error(), "nonce") {
		t.Errorf("Finish error = %v, want ErrLoginFailed about the nonce", err)
	}
	if n := countUsers(t, pool); n != 0 {
		t.Errorf("users = %d, want 0", n)
	}
}

func TestOIDCFinishWrongVerifier(t *testing.T) {
	t.Parallel()
	idp, pool := startIdP(t), pgtest.New(t)
	rp := newRP(t, idp, pool, nil)
	state, code := login(t, rp, "admin@example.com")
	tamperLogin(t, pool, state, "code_verifier")

	_, _, err := rp.Finish(t.Context(), state, code)
	if !errors.Is(err, ErrLoginFailed) || !strings.Contains(err.Error(), "code exchange") {
		t.Errorf("Finish error = %v, want ErrLoginFailed from the code exchange", err)
	}
	if n := countUsers(t, pool); n != 0 {
		t.Errorf("users = %d, want 0", n)
	}
}

// TestOIDCFinishBadIDToken runs the real code flow with an IdP user whose ID
// token carries a wrong claim.
func TestOIDCFinishBadIDToken(t *testing.T) {
	t.Parallel()
	idp, pool := startIdP(t), pgtest.New(t)
	rp := newRP(t, idp, pool, nil)
	for _, tc := range []struct {
		name   string
		claims map[string]any
		reason string
	}{
		{"wrong-audience", map[string]any{"aud": "someone-else"}, "audience"},
		{"wrong-issuer", map[string]any{"iss": "http://127.0.0.1:1/oidc"}, "issued by a different provider"},
		{"expired", map[string]any{"exp": time.Now().Add(-time.Minute).Unix()}, "expired"},
		{"no-subject", map[string]any{"sub": ""}, "subject"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			email := tc.name + "@example.com"
			idp.AddUser(devidp.User{Subject: "sub-" + tc.name, Email: email, Name: tc.name, Claims: tc.claims})
			state, code := login(t, rp, email)

			_, _, err := rp.Finish(t.Context(), state, code)
			if !errors.Is(err, ErrLoginFailed) || !strings.Contains(err.Error(), tc.reason) {
				t.Errorf("Finish error = %v, want ErrLoginFailed mentioning %q", err, tc.reason)
			}
			_, err = db.New(pool).UserGetByIdentity(t.Context(), db.UserGetByIdentityParams{Issuer: idp.Issuer(), Subject: "sub-" + tc.name})
			if !errors.Is(err, db.ErrNotFound) {
				t.Errorf("user row after failed login: err = %v, want not found", err)
			}
		})
	}
}

func TestOIDCLoginMaxAge(t *testing.T) {
	t.Parallel()
	idp, pool := startIdP(t), pgtest.New(t)
	clk := newClock(t, time.Now())
	rp := newRP(t, idp, pool, clk)
	state, code := login(t, rp, "admin@example.com")
	stale, _ := login(t, rp, "admin@example.com")

	clk.Advance(LoginMaxAge + time.Second)
	if _, _, err := rp.Finish(t.Context(), state, code); !errors.Is(err, ErrLoginFailed) {
		t.Errorf("Finish after %v error = %v, want ErrLoginFailed", LoginMaxAge, err)
	}
	// The unfinished stale login is still there for Sweep to reclaim.
	n, err := rp.Sweep(t.Context())
	if err != nil || n != 2 {
		t.Errorf("Sweep = %d, %v; want 2, nil", n, err)
	}
	if _, _, err := rp.Finish(t.Context(), stale, code); !errors.Is(err, ErrLoginFailed) {
		t.Errorf("Finish after Sweep error = %v, want ErrLoginFailed", err)
	}
}

// TestLoginRotatesSession is the sign-in sequence the handlers run: a
// browser arriving with a session cookie leaves with a different one, and
// the old one is dead.
func TestLoginRotatesSession(t *testing.T) {
	t.Parallel()
	idp, pool := startIdP(t), pgtest.New(t)
	rp := newRP(t, idp, pool, nil)
	sessions := NewSessions(pool, SessionConfig{}, nil)
	ctx := t.Context()

	state, code := login(t, rp, "risk-viewer@example.com")
	uid, _, err := rp.Finish(ctx, state, code)
	if err != nil {
		t.Fatalf("Finish: %v", err)
	}
	before, _, err := sessions.Create(ctx, uid)
	if err != nil {
		t.Fatal(err)
	}
	state, code = login(t, rp, "risk-viewer@example.com")
	if uid, _, err = rp.Finish(ctx, state, code); err != nil {
		t.Fatalf("Finish: %v", err)
	}
	after, _, err := sessions.Rotate(ctx, before, uid)
	if err != nil {
		t.Fatalf("Rotate: %v", err)
	}
	if after == before {
		t.Fatalf("session token unchanged by login")
	}
	if _, _, err := sessions.Lookup(ctx, before); !errors.Is(err, ErrUnauthenticated) {
		t.Errorf("Lookup(old token) error = %v, want ErrUnauthenticated", err)
	}
	p, _, err := sessions.Lookup(ctx, after)
	if err != nil || p.UserID != uid {
		t.Errorf("Lookup(new token) = %+v, %v; want user %d", p, err, uid)
	}
}

func TestAuthenticateToken(t *testing.T) {
	t.Parallel()
	idp, pool := startIdP(t), pgtest.New(t)
	rp := newRP(t, idp, pool, nil)
	other, err := devidp.Start(devidp.Config{ClientID: idp.ClientID()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Close() })
	u := devidp.User{Subject: "script-1", Email: "script@example.com", Name: "Script"}

	sign := func(idp *devidp.IdP, change func(map[string]any)) string {
		c := idp.TokenClaims(u, time.Hour)
		if change != nil {
			change(c)
		}
		tok, err := idp.Sign(c)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	valid := sign(idp, nil)
	// Flip one character in the middle of the signature.
	parts := strings.Split(valid, ".")
	sig := []byte(parts[2])
	sig[len(sig)/2] ^= 1
	badSig := parts[0] + "." + parts[1] + "." + string(sig)

	for _, tc := range []struct {
		name  string
		token string
		ok    bool
	}{
		{"valid", valid, true},
		{"wrong-audience", sign(idp, func(c map[string]any) { c["aud"] = "someone-else" }), false},
		{"wrong-issuer", sign(idp, func(c map[string]any) { c["iss"] = other.Issuer() }), false},
		{"expired", sign(idp, func(c map[string]any) { c["exp"] = time.Now().Add(-time.Minute).Unix() }), false},
		{"no-expiry", sign(idp, func(c map[string]any) { delete(c, "exp") }), false},
		{"bad-signature", badSig, false},
		{"other-key", sign(other, func(c map[string]any) { c["iss"] = idp.Issuer() }), false},
		{"alg-none", "eyJhbGciOiJub25lIn0." + parts[1] + ".", false},
		{"garbage", "not-a-jwt", false},
		{"empty", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := rp.AuthenticateToken(t.Context(), tc.token)
			if !tc.ok {
				if !errors.Is(err, ErrUnauthenticated) {
					t.Errorf("AuthenticateToken error = %v, want ErrUnauthenticated", err)
				}
				t.Logf("refused: %v", err)
				return
			}
			if err != nil {
				t.Fatalf("AuthenticateToken: %v", err)
			}
			if p.UserID == 0 || p.Via != "oidc-token" || p.Name != "script@example.com" {
				t.Errorf("principal = %+v, want a user named script@example.com via oidc-token", p)
			}
		})
	}
}

// TestAuthenticateTokenKnownUser: a token for someone who signed in through
// the browser maps to the same user, and a token without profile claims
// does not blank them.
func TestAuthenticateTokenKnownUser(t *testing.T) {
	t.Parallel()
	idp, pool := startIdP(t), pgtest.New(t)
	rp := newRP(t, idp, pool, nil)
	ctx := t.Context()
	state, code := login(t, rp, "risk-admin@example.com")
	uid, _, err := rp.Finish(ctx, state, code)
	if err != nil {
		t.Fatalf("Finish: %v", err)
	}
	// Plain SQL: the team queries belong to another package and may change.
	var teamID int64
	if err := pool.QueryRow(ctx, "INSERT INTO teams (name) VALUES ('risk') RETURNING id").Scan(&teamID); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "INSERT INTO team_members (team_id, user_id, role) VALUES ($1, $2, 'admin')", teamID, uid); err != nil {
		t.Fatal(err)
	}

	c := idp.TokenClaims(devidp.User{Subject: "demo-risk-admin"}, time.Hour)
	delete(c, "email")
	delete(c, "name")
	tok, err := idp.Sign(c)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		p, err := rp.AuthenticateToken(ctx, tok)
		if err != nil {
			t.Fatalf("AuthenticateToken: %v", err)
		}
		if p.UserID != uid || p.Name != "risk-admin@example.com" || p.RoleIn(teamID) != RoleAdmin {
			t.Errorf("principal = %+v, want user %d risk-admin@example.com, admin of team %d", p, uid, teamID)
		}
	}
	if n := countUsers(t, pool); n != 1 {
		t.Errorf("users = %d, want 1", n)
	}
}

func TestNewOIDCValidates(t *testing.T) {
	t.Parallel()
	_, err := NewOIDC(context.Background(), OIDCConfig{Issuer: "http://127.0.0.1:1/oidc"}, nil, nil)
	if err == nil {
		t.Errorf("NewOIDC without client id: want error")
	}
	if s := (OIDCConfig{ClientSecret: "hunter2"}).String(); strings.Contains(s, "hunter2") {
		t.Errorf("OIDCConfig.String() = %q shows the secret", s)
	}
}
