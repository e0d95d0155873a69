package cli

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/oauth2"
)

// Token is what `modelplane login` keeps in a context: an OIDC ID token
// the API takes as a bearer token, and how to get a fresh one.
type Token struct {
	IDToken      string    `json:"id_token"`
	RefreshToken string    `json:"refresh_token,omitempty"`
	Expiry       time.Time `json:"expiry"`
	Issuer       string    `json:"issuer"`
	ClientID     string    `json:"client_id"`
	TokenURL     string    `json:"token_url"`
}

// loginTimeout bounds how long login waits for the browser.
const loginTimeout = 5 * time.Minute

// refreshBefore is how long before its expiry a token is refreshed.
const refreshBefore = 30 * time.Second

func (a *app) loginCmd() *cobra.Command {
	var hint string
	var noBrowser bool
	cmd := &cobra.Command{
		Use:   "login [--login-hint EMAIL] [--no-browser]",
		Short: "Sign in through the server's identity provider and keep a refreshable token",
		Long: `login signs you in with OIDC (authorization code with PKCE) against the
identity provider the server names (GET /api/v1/auth/cli): it opens your
browser on the provider's sign-in page and receives the answer on a
loopback address (127.0.0.1, any free port, RFC 8252). The token, and the
refresh token that renews it, are kept in the context (--context, else
the current one, else "default") of the configuration file, mode 0600.
Commands then call the API with the token when no key is given.`,
		Args: args(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.login(cmd.Context(), hint, noBrowser)
		},
	}
	cmd.Flags().StringVar(&hint, "login-hint", "", "the email to sign in as, passed to the identity provider")
	cmd.Flags().BoolVar(&noBrowser, "no-browser", false, "print the sign-in URL instead of opening a browser")
	return cmd
}

func (a *app) logoutCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "logout",
		Short: "Forget the token login kept for this server",
		Args:  args(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			t, err := a.resolve()
			if err != nil {
				return err
			}
			cfg, err := a.loadConfig()
			if err != nil {
				return err
			}
			n := 0
			for name, c := range cfg.Contexts {
				if c.Token != nil && apiBase(c.API) == t.api {
					c.Token = nil
					cfg.Contexts[name] = c
					n++
				}
			}
			if n == 0 {
				fmt.Fprintf(a.env.Stderr, "not signed in to %s\n", t.api)
				return nil
			}
			if err := a.saveConfig(cfg); err != nil {
				return err
			}
			fmt.Fprintf(a.env.Stderr, "signed out of %s\n", t.api)
			return nil
		},
	}
}

// discovery is the part of the issuer's OIDC discovery document login reads.
type discovery struct {
	AuthURL  string   `json:"authorization_endpoint"`
	TokenURL string   `json:"token_endpoint"`
	Scopes   []string `json:"scopes_supported"`
}

func (a *app) login(ctx context.Context, hint string, noBrowser bool) error {
	t, err := a.resolve()
	if err != nil {
		return err
	}
	h, err := a.httpFor(t)
	if err != nil {
		return err
	}
	var cli struct {
		Issuer   string `json:"issuer"`
		ClientID string `json:"client_id"`
	}
	if err := getJSON(ctx, h, t.api+"/auth/cli", &cli); err != nil {
		return fmt.Errorf("ask the server how to sign in: %w", err)
	}
	idp, err := a.idpHTTP(t)
	if err != nil {
		return err
	}
	var disc discovery
	if err := getJSON(ctx, idp, strings.TrimRight(cli.Issuer, "/")+"/.well-known/openid-configuration", &disc); err != nil {
		return fmt.Errorf("identity provider discovery: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("listen for the sign-in answer: %w", err)
	}
	defer ln.Close()
	scopes := []string{"openid", "email", "profile"}
	if slices.Contains(disc.Scopes, "offline_access") {
		scopes = append(scopes, "offline_access")
	}
	conf := oauth2.Config{ClientID: cli.ClientID, Scopes: scopes,
		Endpoint:    oauth2.Endpoint{AuthURL: disc.AuthURL, TokenURL: disc.TokenURL, AuthStyle: oauth2.AuthStyleInParams},
		RedirectURL: "http://" + ln.Addr().String() + "/callback"}
	state, nonce, verifier := randomString(), randomString(), oauth2.GenerateVerifier()
	opts := []oauth2.AuthCodeOption{oauth2.S256ChallengeOption(verifier), oauth2.SetAuthURLParam("nonce", nonce)}
	if hint != "" {
		opts = append(opts, oauth2.SetAuthURLParam("login_hint", hint))
	}
	authURL := conf.AuthCodeURL(state, opts...)

	type answer struct {
		code string
		err  error
	}
	answers := make(chan answer, 1)
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/callback" {
			http.NotFound(w, r)
			return
		}
		q := r.URL.Query()
		var ans answer
		switch {
		case q.Get("state") != state:
			ans.err = errors.New("the sign-in answer's state does not match: try again")
		case q.Get("error") != "":
			ans.err = fmt.Errorf("the identity provider refused: %s %s", q.Get("error"), q.Get("error_description"))
		default:
			ans.code = q.Get("code")
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if ans.err != nil {
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprintln(w, "modelplane login failed:", ans.err)
		} else {
			fmt.Fprintln(w, "Signed in to modelplane. You can close this tab.")
		}
		select {
		case answers <- ans:
		default:
		}
	})}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()

	fmt.Fprintf(a.env.Stderr, "Sign in at:\n  %s\n", authURL)
	if !noBrowser {
		if err := a.openBrowser(authURL); err != nil {
			fmt.Fprintf(a.env.Stderr, "(could not open a browser: %v; open the URL yourself)\n", err)
		}
	}
	wctx, cancel := context.WithTimeout(ctx, loginTimeout)
	defer cancel()
	var ans answer
	select {
	case <-wctx.Done():
		return fmt.Errorf("no sign-in answer: %w", wctx.Err())
	case ans = <-answers:
	}
	if ans.err != nil {
		return ans.err
	}
	tok, err := conf.Exchange(context.WithValue(ctx, oauth2.HTTPClient, idp), ans.code, oauth2.VerifierOption(verifier))
	if err != nil {
		return fmt.Errorf("exchange the sign-in code: %w", err)
	}
	stored, err := tokenOf(tok, cli.Issuer, cli.ClientID, disc.TokenURL)
	if err != nil {
		return err
	}
	if claims, err := jwtClaims(stored.IDToken); err != nil || claims.Nonce != nonce {
		return errors.New("the ID token does not carry this sign-in's nonce")
	}
	if err := a.keepToken(t.api, stored); err != nil {
		return err
	}
	// The API names who signed in.
	a.client = nil
	a.key = stored.IDToken
	c, err := a.apiClient()
	if err != nil {
		return err
	}
	b, err := c.call(ctx, http.MethodGet, "/me", nil, nil)
	if err != nil {
		return fmt.Errorf("signed in, but the API refused the token: %w", err)
	}
	var me struct {
		Name string `json:"name"`
	}
	_ = json.Unmarshal(b, &me)
	fmt.Fprintf(a.env.Stderr, "signed in to %s as %s\n", t.api, me.Name)
	return nil
}

// tokenOf keeps what login and refresh need of an OAuth answer.
func tokenOf(tok *oauth2.Token, issuer, clientID, tokenURL string) (Token, error) {
	id, _ := tok.Extra("id_token").(string)
	if id == "" {
		return Token{}, errors.New("the identity provider answered no ID token")
	}
	claims, err := jwtClaims(id)
	if err != nil {
		return Token{}, err
	}
	return Token{IDToken: id, RefreshToken: tok.RefreshToken, Expiry: time.Unix(claims.Exp, 0).UTC(), Issuer: issuer,
		ClientID: clientID, TokenURL: tokenURL}, nil
}

// jwtClaims reads a JWT's claims without checking its signature: the
// client only needs to know when the token expires and that it answers its
// own request; the API checks the signature.
func jwtClaims(raw string) (struct {
	Exp   int64  `json:"exp"`
	Nonce string `json:"nonce"`
}, error) {
	var c struct {
		Exp   int64  `json:"exp"`
		Nonce string `json:"nonce"`
	}
	parts := strings.Split(raw, ".")
	if len(parts) != 3 {
		return c, errors.New("the ID token is not a JWT")
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return c, fmt.Errorf("the ID token: %w", err)
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("the ID token: %w", err)
	}
	return c, nil
}

// keepToken stores tok in the context login signs in for: --context,
// else the current one, else "default" (made current).
func (a *app) keepToken(api string, tok Token) error {
	cfg, err := a.loadConfig()
	if err != nil {
		return err
	}
	name := a.ctxName
	if name == "" {
		name = a.env.Getenv("MP_CONTEXT")
	}
	if name == "" {
		name = cfg.Current
	}
	if name == "" {
		name = "default"
	}
	if cfg.Contexts == nil {
		cfg.Contexts = map[string]ConfigContext{}
	}
	c := cfg.Contexts[name]
	if c.API != "" && apiBase(c.API) != api {
		return usagef("context %q is for %s, not %s: pass --context NAME for another", name, c.API, api)
	}
	c.API, c.Token = api, &tok
	cfg.Contexts[name] = c
	if cfg.Current == "" {
		cfg.Current = name
	}
	return a.saveConfig(cfg)
}

// loginToken returns a token login kept for api, refreshed when it is
// about to expire; "" when there is none.
func (a *app) loginToken(ctx context.Context, h *http.Client, api string) (string, error) {
	cfg, err := a.loadConfig()
	if err != nil {
		return "", err
	}
	names := []string{a.ctxName, a.env.Getenv("MP_CONTEXT"), cfg.Current}
	names = append(names, cfg.names()...)
	for _, name := range names {
		c, ok := cfg.Contexts[name]
		if !ok || c.Token == nil || apiBase(c.API) != api {
			continue
		}
		if time.Until(c.Token.Expiry) > refreshBefore {
			return c.Token.IDToken, nil
		}
		if c.Token.RefreshToken == "" {
			return "", fmt.Errorf("the token of context %q expired: run 'modelplane login'", name)
		}
		conf := oauth2.Config{ClientID: c.Token.ClientID, Endpoint: oauth2.Endpoint{TokenURL: c.Token.TokenURL, AuthStyle: oauth2.AuthStyleInParams}}
		rctx := context.WithValue(ctx, oauth2.HTTPClient, h)
		tok, err := conf.TokenSource(rctx, &oauth2.Token{RefreshToken: c.Token.RefreshToken, Expiry: time.Unix(1, 0)}).Token()
		if err != nil {
			return "", fmt.Errorf("refresh the token of context %q (run 'modelplane login'): %w", name, err)
		}
		fresh, err := tokenOf(tok, c.Token.Issuer, c.Token.ClientID, c.Token.TokenURL)
		if err != nil {
			return "", err
		}
		if fresh.RefreshToken == "" {
			fresh.RefreshToken = c.Token.RefreshToken
		}
		c.Token = &fresh
		cfg.Contexts[name] = c
		if err := a.saveConfig(cfg); err != nil {
			return "", err
		}
		return fresh.IDToken, nil
	}
	return "", nil
}

// idpHTTP is the client for the identity provider: Env.HTTP, else the
// system's roots, with the server's CA bundle added when one is named (the
// IdP may have a public certificate or one of the same internal CA).
func (a *app) idpHTTP(t target) (*http.Client, error) {
	if a.env.HTTP != nil {
		return a.env.HTTP, nil
	}
	if t.ca == "" {
		return http.DefaultClient, nil
	}
	b, err := os.ReadFile(t.ca)
	if err != nil {
		return nil, usagef("--tls-ca: %v", err)
	}
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	pool.AppendCertsFromPEM(b)
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool}
	return &http.Client{Transport: tr}, nil
}

// openBrowser opens url in the user's browser (Env.OpenBrowser in tests).
func (a *app) openBrowser(u string) error {
	if a.env.OpenBrowser != nil {
		return a.env.OpenBrowser(u)
	}
	var cmd *exec.Cmd
	switch runtime.GOOS {
	case "darwin":
		cmd = exec.Command("open", u)
	case "windows":
		cmd = exec.Command("rundll32", "url.dll,FileProtocolHandler", u)
	default:
		cmd = exec.Command("xdg-open", u)
	}
	return cmd.Start()
}

func getJSON(ctx context.Context, h *http.Client, u string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := h.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return readProblem(resp)
	}
	return json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(v)
}

func randomString() string {
	var b [24]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}
