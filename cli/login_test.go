package cli_test

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"modelplane/app"
	"modelplane/auth"
	"modelplane/auth/devidp"
	"modelplane/cli"
	"modelplane/controlplane"
	"modelplane/internal/pgtest"
)

// TestLoginWithTheDevIdentityProvider signs in with `modelplane login`
// against the development identity provider, as `modelplane dev` runs it
// (the CLI's public client registered with loopback redirects and refresh
// tokens): the client listens on a loopback port the IdP redirects to, and
// the test plays the browser by following that redirect. The token is kept
// 0600 in the configuration directory and used when no key is given; an
// expired one is refreshed; logout forgets it.
func TestLoginWithTheDevIdentityProvider(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	ts := httptest.NewUnstartedServer(nil)
	base := "http://" + ts.Listener.Addr().String()
	idp, err := devidp.Start(devidp.Config{RedirectURLs: []string{base + "/auth/callback"}, PublicClients: []string{app.DevCLIClientID}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { idp.Close() })
	oidc, err := auth.NewOIDC(t.Context(), auth.OIDCConfig{Issuer: idp.Issuer(), ClientID: idp.ClientID(), ClientSecret: idp.ClientSecret(),
		RedirectURL: base + "/auth/callback", CLIClientID: app.DevCLIClientID}, pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	cp, err := controlplane.New(controlplane.Stores{Pool: pool}, controlplane.Config{Log: slog.New(slog.DiscardHandler), OIDC: oidc,
		ArtifactDir: t.TempDir(), Sessions: auth.SessionConfig{IdleTimeout: time.Hour, AbsoluteTimeout: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	ts.Config.Handler = app.NewHTTP(cp, app.HTTPOptions{MaxUploadBytes: 1 << 20}).Handler()
	ts.Start()
	t.Cleanup(ts.Close)

	cfgDir := t.TempDir()
	env := map[string]string{"MP_API": ts.URL + "/api/v1"}
	var visited []string
	run := func(argv ...string) result {
		var out, errb strings.Builder
		code := cli.Run(t.Context(), argv, cli.Env{Stdout: &out, Stderr: &errb, Getenv: func(k string) string { return env[k] }, ConfigDir: cfgDir,
			OpenBrowser: func(u string) error {
				// The browser: the IdP signs the hinted user in and redirects
				// to the client's loopback address, which answers the page.
				visited = append(visited, u)
				resp, err := http.Get(u)
				if err != nil {
					return err
				}
				defer resp.Body.Close()
				if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Request.URL.Host, "127.0.0.1:") {
					t.Errorf("the browser ended at %s with %d; want the loopback callback's page", resp.Request.URL, resp.StatusCode)
				}
				return nil
			}})
		return result{stdout: out.String(), stderr: errb.String(), code: code}
	}

	r := run("login", "--login-hint", "risk-engineer@example.com")
	r.ok(t, "login")
	if !strings.Contains(r.stderr, "signed in to "+ts.URL+"/api/v1 as risk-engineer@example.com") {
		t.Errorf("login said %q; want who signed in", r.stderr)
	}
	if len(visited) != 1 || !strings.Contains(visited[0], "code_challenge_method=S256") || !strings.Contains(visited[0], "redirect_uri=http%3A%2F%2F127.0.0.1%3A") ||
		!strings.Contains(visited[0], "client_id="+app.DevCLIClientID) {
		t.Errorf("sign-in URL %v; want PKCE S256, a loopback redirect and the CLI's client", visited)
	}
	path := filepath.Join(cfgDir, "config.json")
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("config.json: %v %v; want mode 0600", fi, err)
	}
	read := func() cli.Config {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var c cli.Config
		if err := json.Unmarshal(b, &c); err != nil {
			t.Fatal(err)
		}
		return c
	}
	cfg := read()
	tok := cfg.Contexts[cfg.Current].Token
	if tok == nil || tok.IDToken == "" || tok.RefreshToken == "" || tok.ClientID != app.DevCLIClientID {
		t.Fatalf("kept %+v; want an ID token and a refresh token of the CLI's client", cfg)
	}
	me := jsonOf[map[string]any](t, run("me", "-o", "json").ok(t, "me with the login's token"))
	if me["name"] != "risk-engineer@example.com" || me["via"] != "oidc-token" {
		t.Errorf("me = %v; want the signed-in user", me)
	}

	// An expired token is refreshed with the refresh token, and kept.
	c := cfg.Contexts[cfg.Current]
	c.Token.Expiry = time.Now().Add(-time.Minute)
	cfg.Contexts[cfg.Current] = c
	b, _ := json.Marshal(cfg)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	run("me").ok(t, "me after the token expired")
	if after := read().Contexts[cfg.Current].Token; after == nil || !after.Expiry.After(time.Now()) {
		t.Errorf("token after the refresh %+v; want a fresh expiry", after)
	}

	r = run("logout")
	r.ok(t, "logout")
	if read().Contexts[cfg.Current].Token != nil {
		t.Error("logout kept the token")
	}
	run("me").want(t, "me after logout", 1, "401")
}
