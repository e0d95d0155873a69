package devidp

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
)

const redirect = "http://127.0.0.1:1/cb"

func start(t *testing.T) *IdP {
	t.Helper()
	p, err := Start(Config{RedirectURLs: []string{redirect}})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

var noRedirects = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

const verifier = "a-pkce-code-verifier-of-at-least-forty-three-characters"

func challenge(v string) string {
	s := sha256.Sum256([]byte(v))
	return base64.RawURLEncoding.EncodeToString(s[:])
}

// authParams are a valid authorization request; cases change them.
func authParams(p *IdP) url.Values {
	return url.Values{
		"response_type":         {"code"},
		"client_id":             {p.ClientID()},
		"redirect_uri":          {redirect},
		"scope":                 {"openid email profile"},
		"state":                 {"st"},
		"nonce":                 {"no"},
		"code_challenge":        {challenge(verifier)},
		"code_challenge_method": {"S256"},
		"login_hint":            {"risk-viewer@example.com"},
	}
}

func get(t *testing.T, u string) (*http.Response, string) {
	t.Helper()
	resp, err := noRedirects.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func TestStartLoopbackOnly(t *testing.T) {
	t.Parallel()
	for _, addr := range []string{"0.0.0.0:0", ":0", "10.1.2.3:0", "example.com:0"} {
		if p, err := Start(Config{Addr: addr}); err == nil {
			p.Close()
			t.Errorf("Start(%q) succeeded, want refused", addr)
		}
	}
}

func TestDemoUsers(t *testing.T) {
	t.Parallel()
	want := []string{"admin@example.com", "risk-admin@example.com", "risk-engineer@example.com",
		"risk-viewer@example.com", "search-admin@example.com", "finance@example.com"}
	users := DemoUsers()
	subjects := map[string]bool{}
	for i, u := range users {
		if i >= len(want) || u.Email != want[i] {
			t.Errorf("user %d = %q, want %q", i, u.Email, want[min(i, len(want)-1)])
		}
		if u.Subject == "" || u.Name == "" || u.Description == "" || subjects[u.Subject] {
			t.Errorf("user %q: empty or duplicate subject, name or description: %+v", u.Email, u)
		}
		subjects[u.Subject] = true
	}
	if len(users) != len(want) {
		t.Errorf("%d demo users, want %d", len(users), len(want))
	}
}

func TestAuthorize(t *testing.T) {
	t.Parallel()
	p := start(t)
	for _, tc := range []struct {
		name   string
		change func(url.Values)
		status int
		body   string // in the body (or Location for redirects)
	}{
		{"login-hint", func(url.Values) {}, http.StatusFound, "state=st"},
		{"no-hint-shows-sign-in-page", func(v url.Values) { v.Del("login_hint") }, http.StatusOK, "finance@example.com"},
		{"unknown-hint", func(v url.Values) { v.Set("login_hint", "nobody@example.com") }, http.StatusBadRequest, "No such user"},
		{"no-pkce", func(v url.Values) { v.Del("code_challenge"); v.Del("code_challenge_method") }, http.StatusBadRequest, "PKCE"},
		{"plain-pkce", func(v url.Values) { v.Set("code_challenge_method", "plain") }, http.StatusBadRequest, "PKCE"},
		{"unregistered-redirect", func(v url.Values) { v.Set("redirect_uri", "http://evil.example/cb") }, http.StatusBadRequest, "redirect_uri"},
		{"wrong-client", func(v url.Values) { v.Set("client_id", "other") }, http.StatusUnauthorized, "invalid_client"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			v := authParams(p)
			tc.change(v)
			resp, body := get(t, p.Issuer()+"/authorize?"+v.Encode())
			if resp.StatusCode != tc.status {
				t.Fatalf("status = %d, want %d; body %s", resp.StatusCode, tc.status, body)
			}
			if got := body + resp.Header.Get("Location"); !strings.Contains(got, tc.body) {
				t.Errorf("response %q lacks %q", got, tc.body)
			}
		})
	}
}

// code runs authorize for email and returns the code.
func code(t *testing.T, p *IdP, email string) string {
	t.Helper()
	v := authParams(p)
	v.Set("login_hint", email)
	resp, body := get(t, p.Issuer()+"/authorize?"+v.Encode())
	if resp.StatusCode != http.StatusFound {
		t.Fatalf("authorize status = %d; body %s", resp.StatusCode, body)
	}
	loc, _ := url.Parse(resp.Header.Get("Location"))
	return loc.Query().Get("code")
}

// exchange posts to the token endpoint with HTTP basic client credentials.
func exchange(t *testing.T, p *IdP, code, verifier string) (int, map[string]any) {
	t.Helper()
	form := url.Values{"grant_type": {"authorization_code"}, "code": {code}, "redirect_uri": {redirect}}
	if verifier != "" {
		form.Set("code_verifier", verifier)
	}
	req, _ := http.NewRequest("POST", p.Issuer()+"/token", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth(url.QueryEscape(p.ClientID()), url.QueryEscape(p.ClientSecret()))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out
}

func TestCodeFlow(t *testing.T) {
	t.Parallel()
	p := start(t)
	ctx := t.Context()

	c := code(t, p, "finance@example.com")
	status, out := exchange(t, p, c, verifier)
	if status != http.StatusOK {
		t.Fatalf("token status = %d, want 200: %v", status, out)
	}
	provider, err := oidc.NewProvider(ctx, p.Issuer())
	if err != nil {
		t.Fatal(err)
	}
	idt, err := provider.Verifier(&oidc.Config{ClientID: p.ClientID()}).Verify(ctx, out["id_token"].(string))
	if err != nil {
		t.Fatalf("verify id token: %v", err)
	}
	var claims struct{ Email, Name string }
	idt.Claims(&claims)
	if idt.Subject != "demo-finance" || idt.Nonce != "no" || claims.Email != "finance@example.com" || claims.Name != "Fiona Finance" {
		t.Errorf("id token sub %q nonce %q email %q name %q, want demo-finance no finance@example.com Fiona Finance",
			idt.Subject, idt.Nonce, claims.Email, claims.Name)
	}

	// Codes are single use.
	if status, _ := exchange(t, p, c, verifier); status != http.StatusUnauthorized {
		t.Errorf("second exchange of a code: status %d, want 401", status)
	}
	// PKCE: the verifier must match the challenge, and must be sent.
	if status, _ := exchange(t, p, code(t, p, "admin@example.com"), verifier+"x"); status != http.StatusUnauthorized {
		t.Errorf("exchange with a wrong verifier: status %d, want 401", status)
	}
	if status, _ := exchange(t, p, code(t, p, "admin@example.com"), ""); status != http.StatusUnauthorized {
		t.Errorf("exchange without a verifier: status %d, want 401", status)
	}
}

func TestSign(t *testing.T) {
	t.Parallel()
	p := start(t)
	ctx := t.Context()
	u := User{Subject: "s", Email: "s@example.com", Claims: map[string]any{"groups": []string{"a"}}}
	tok, err := p.Sign(p.TokenClaims(u, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	provider, err := oidc.NewProvider(ctx, p.Issuer())
	if err != nil {
		t.Fatal(err)
	}
	idt, err := provider.Verifier(&oidc.Config{ClientID: p.ClientID()}).Verify(ctx, tok)
	if err != nil {
		t.Fatalf("verify: %v", err)
	}
	var c struct{ Groups []string }
	idt.Claims(&c)
	if idt.Subject != "s" || len(c.Groups) != 1 {
		t.Errorf("token sub %q groups %v, want s [a]", idt.Subject, c.Groups)
	}
}

// TestPublicClient checks the command-line client's registration: any
// loopback port is a redirect it may use, nothing else is; the code it
// gets is refused to the confidential client, and its tokens name it as
// aud.
func TestPublicClient(t *testing.T) {
	t.Parallel()
	p, err := Start(Config{RedirectURLs: []string{redirect}, PublicClients: []string{"cli"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	q := authParams(p)
	q.Set("client_id", "cli")
	for _, ru := range []string{"https://evil.example.com/cb", "http://10.0.0.1:5000/cb", "http://evil.example.com:8080/cb"} {
		q.Set("redirect_uri", ru)
		if resp, body := get(t, p.Issuer()+"/authorize?"+q.Encode()); resp.StatusCode != http.StatusBadRequest {
			t.Errorf("public client redirecting to %s: %d %s; want 400", ru, resp.StatusCode, body)
		}
	}
	q.Set("redirect_uri", "http://127.0.0.1:45678/callback")
	resp, body := get(t, p.Issuer()+"/authorize?"+q.Encode())
	loc, _ := url.Parse(resp.Header.Get("Location"))
	if resp.StatusCode != http.StatusFound || loc == nil || loc.Host != "127.0.0.1:45678" {
		t.Fatalf("public client on a loopback port: %d %s %s", resp.StatusCode, resp.Header.Get("Location"), body)
	}
	code := loc.Query().Get("code")
	// The confidential client cannot redeem it.
	if status, _ := exchange(t, p, code, verifier); status == http.StatusOK {
		t.Error("the confidential client redeemed the public client's code")
	}
	form := url.Values{"grant_type": {"authorization_code"}, "code": {code}, "code_verifier": {verifier}, "client_id": {"cli"},
		"redirect_uri": {"http://127.0.0.1:45678/callback"}}
	r, err := http.PostForm(p.Issuer()+"/token", form)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(r.Body).Decode(&out)
	if r.StatusCode != http.StatusOK || out["refresh_token"] == nil {
		t.Fatalf("public client's exchange: %d %v; want tokens with a refresh token", r.StatusCode, out)
	}
	provider, err := oidc.NewProvider(t.Context(), p.Issuer())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := provider.Verifier(&oidc.Config{ClientID: "cli"}).Verify(t.Context(), out["id_token"].(string)); err != nil {
		t.Errorf("the public client's ID token does not name it as aud: %v", err)
	}
}
