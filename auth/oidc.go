package auth

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/coder/quartz"
	"github.com/coreos/go-oidc/v3/oidc"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/oauth2"

	"modelplane/db"
)

// ErrLoginFailed means a browser sign-in could not be completed: unknown,
// used or stale state, a refused code exchange, an ID token that fails
// verification or carries the wrong nonce. The wrapped message says which,
// for the log; the user is only told to sign in again.
var ErrLoginFailed = errors.New("login failed")

// LoginMaxAge is how long a started sign-in may take before its callback is
// refused.
const LoginMaxAge = 10 * time.Minute

// defaultScopes are requested when OIDCConfig.Scopes is empty.
var defaultScopes = []string{oidc.ScopeOpenID, "email", "profile"}

// OIDCConfig is the relying party's registration at the identity provider.
type OIDCConfig struct {
	Issuer       string   // discovered from Issuer + "/.well-known/openid-configuration"
	ClientID     string   // also the audience every accepted token must name
	ClientSecret string   // never printed: see String
	RedirectURL  string   // the callback URL registered at the IdP
	Scopes       []string // default openid, email, profile
	// CLIClientID is the public client (no secret, PKCE, loopback
	// redirects) of the command-line client's `modelplane login`; ID
	// tokens issued to it are accepted as bearer tokens too. "" accepts
	// none and leaves login off.
	CLIClientID string
	// HTTPClient makes discovery, JWKS and code-exchange calls; nil is a
	// plain client. `modelplane server` passes the egress allow-list's
	// client, so the IdP is dialled only at an address that list accepts.
	HTTPClient *http.Client `json:"-"`
}

// String prints the config with the secret hidden.
func (c OIDCConfig) String() string {
	return fmt.Sprintf("{Issuer:%s ClientID:%s ClientSecret:<secret> RedirectURL:%s Scopes:%v CLIClientID:%s}",
		c.Issuer, c.ClientID, c.RedirectURL, c.Scopes, c.CLIClientID)
}

// LogValue keeps the secret out of structured logs too.
func (c OIDCConfig) LogValue() slog.Value { return slog.StringValue(c.String()) }

// OIDC is the relying party: it runs the browser code flow (with PKCE, state
// and nonce) and verifies bearer tokens from the same issuer.
type OIDC struct {
	oauth    oauth2.Config
	verifier *oidc.IDTokenVerifier
	// cliVerifier accepts the ID tokens of CLIClientID; nil without one.
	cliVerifier *oidc.IDTokenVerifier
	cliClientID string
	client      *http.Client
	pool        *pgxpool.Pool
	clock       quartz.Clock
	// issuer, clientID and jwksURL are what gateways need to verify tokens
	// themselves (see IdentityPublisher).
	issuer, clientID, jwksURL string
}

// NewOIDC discovers the provider and returns a relying party; clock is
// what tokens and sign-ins expire on (quartz.NewReal() when nil).
func NewOIDC(ctx context.Context, cfg OIDCConfig, pool *pgxpool.Pool, clock quartz.Clock) (*OIDC, error) {
	if cfg.Issuer == "" || cfg.ClientID == "" || cfg.RedirectURL == "" {
		return nil, errors.New("oidc: issuer, client id and redirect url are required")
	}
	if clock == nil {
		clock = quartz.NewReal()
	}
	scopes := cfg.Scopes
	if len(scopes) == 0 {
		scopes = defaultScopes
	}
	// One client with a timeout for discovery, JWKS and the code exchange:
	// a hung IdP must not hang sign-ins or API calls.
	client := cfg.HTTPClient
	if client == nil {
		client = &http.Client{Timeout: 10 * time.Second}
	}
	provider, err := oidc.NewProvider(oidc.ClientContext(ctx, client), cfg.Issuer)
	if err != nil {
		return nil, fmt.Errorf("oidc discovery: %w", err)
	}
	var disc struct {
		JWKSURL string `json:"jwks_uri"`
	}
	if err := provider.Claims(&disc); err != nil {
		return nil, fmt.Errorf("oidc discovery: %w", err)
	}
	var cliVerifier *oidc.IDTokenVerifier
	if cfg.CLIClientID != "" {
		cliVerifier = provider.Verifier(&oidc.Config{ClientID: cfg.CLIClientID, Now: func() time.Time { return clock.Now() }})
	}
	return &OIDC{
		cliVerifier: cliVerifier,
		cliClientID: cfg.CLIClientID,
		issuer:      cfg.Issuer,
		clientID:    cfg.ClientID,
		jwksURL:     disc.JWKSURL,
		oauth: oauth2.Config{
			ClientID:     cfg.ClientID,
			ClientSecret: cfg.ClientSecret,
			Endpoint:     provider.Endpoint(),
			RedirectURL:  cfg.RedirectURL,
			Scopes:       scopes,
		},
		// The verifier checks signature (keys from the provider's JWKS, cached
		// and refetched on an unknown kid), iss, aud = client id and exp.
		// go-oidc takes its clock as a func.
		verifier: provider.Verifier(&oidc.Config{ClientID: cfg.ClientID, Now: func() time.Time { return clock.Now() }}),
		client:   client,
		pool:     pool,
		clock:    clock,
	}, nil
}

// CLI returns the issuer and the command-line client's id for `modelplane
// login`; ok is false when no CLI client is configured.
func (o *OIDC) CLI() (issuer, clientID string, ok bool) {
	return o.issuer, o.cliClientID, o.cliClientID != ""
}

// Begin starts a browser sign-in and returns the IdP URL to redirect to.
// returnTo is where Finish sends the user afterwards; anything but a local
// path becomes "/", so the callback cannot be turned into an open redirect.
func (o *OIDC) Begin(ctx context.Context, returnTo string) (authURL string, err error) {
	return o.BeginHint(ctx, returnTo, "")
}

// BeginHint is Begin with an OIDC login_hint (an email) telling the IdP who
// is signing in; the development IdP signs that demo user in directly.
func (o *OIDC) BeginHint(ctx context.Context, returnTo, loginHint string) (authURL string, err error) {
	state, err := randomToken()
	if err != nil {
		return "", fmt.Errorf("begin login: %w", err)
	}
	nonce, err := randomToken()
	if err != nil {
		return "", fmt.Errorf("begin login: %w", err)
	}
	verifier := oauth2.GenerateVerifier()
	err = db.New(o.pool).OIDCLoginInsert(ctx, db.OIDCLoginInsertParams{
		State:        state,
		Nonce:        nonce,
		CodeVerifier: verifier,
		ReturnTo:     LocalPath(returnTo),
		CreatedAt:    o.clock.Now(),
	})
	if err != nil {
		return "", fmt.Errorf("begin login: %w", err)
	}
	opts := []oauth2.AuthCodeOption{oidc.Nonce(nonce), oauth2.S256ChallengeOption(verifier)}
	if loginHint != "" {
		opts = append(opts, oauth2.SetAuthURLParam("login_hint", loginHint))
	}
	return o.oauth.AuthCodeURL(state, opts...), nil
}

// LoginCookie names the cookie that binds a sign-in to the browser that
// began it. The state in oidc_logins proves that someone began the sign-in;
// only this cookie proves it was this browser, so an attacker cannot send a
// victim the callback URL of the attacker's own sign-in (login CSRF).
const LoginCookie = "__Host-mp_login"

// LoginCookieFor returns the cookie to set with the redirect to authURL, an
// URL from Begin. At the callback, check ValidCSRF(cookie value, state)
// before Finish, then clear it with ClearLoginCookie. SameSite=Lax is what
// lets the browser send it on the top-level redirect back from the IdP.
func LoginCookieFor(authURL string) *http.Cookie {
	var state string
	if u, err := url.Parse(authURL); err == nil {
		state = u.Query().Get("state")
	}
	return &http.Cookie{
		Name:     LoginCookie,
		Value:    state,
		Path:     "/",
		MaxAge:   int(LoginMaxAge / time.Second),
		Secure:   true,
		HttpOnly: true,
		SameSite: http.SameSiteLaxMode,
	}
}

// ClearLoginCookie returns a cookie that makes the browser drop LoginCookie.
func ClearLoginCookie() *http.Cookie {
	c := LoginCookieFor("")
	c.MaxAge = -1
	return c
}

// Finish completes a sign-in from the callback's state and code: it takes
// the login by state (once, and only within LoginMaxAge), exchanges the code
// with the PKCE verifier, verifies the ID token and its nonce, and records
// the user keyed by issuer and subject. Every failure wraps ErrLoginFailed;
// nothing but the consumed login row changes before the user upsert, which
// is the last step. The caller first checks the state against LoginCookie.
func (o *OIDC) Finish(ctx context.Context, state, code string) (userID int64, returnTo string, err error) {
	if state == "" || code == "" {
		return 0, "", fmt.Errorf("%w: missing state or code", ErrLoginFailed)
	}
	q := db.New(o.pool)
	login, err := q.OIDCLoginTake(ctx, db.OIDCLoginTakeParams{State: state, NotBefore: o.clock.Now().Add(-LoginMaxAge)})
	if err != nil {
		if errors.Is(err, db.ErrNotFound) {
			return 0, "", fmt.Errorf("%w: unknown, used or expired state", ErrLoginFailed)
		}
		return 0, "", fmt.Errorf("%w: take login: %w", ErrLoginFailed, err)
	}
	tok, err := o.oauth.Exchange(oidc.ClientContext(ctx, o.client), code, oauth2.VerifierOption(login.CodeVerifier))
	if err != nil {
		// RetrieveError's text quotes the IdP's answer, which may echo the
		// code; log only its status and error code.
		var re *oauth2.RetrieveError
		if errors.As(err, &re) {
			return 0, "", fmt.Errorf("%w: code exchange refused: %d %s", ErrLoginFailed, re.Response.StatusCode, re.ErrorCode)
		}
		return 0, "", fmt.Errorf("%w: code exchange: %w", ErrLoginFailed, err)
	}
	raw, _ := tok.Extra("id_token").(string)
	if raw == "" {
		return 0, "", fmt.Errorf("%w: no id_token in token response", ErrLoginFailed)
	}
	idt, err := o.verifier.Verify(ctx, raw)
	if err != nil {
		return 0, "", fmt.Errorf("%w: id token: %w", ErrLoginFailed, err)
	}
	// go-oidc leaves the nonce to the caller. It binds the ID token to this
	// browser's login, so a token from another login cannot be injected.
	if subtle.ConstantTimeCompare([]byte(idt.Nonce), []byte(login.Nonce)) != 1 {
		return 0, "", fmt.Errorf("%w: id token nonce does not match", ErrLoginFailed)
	}
	if idt.AccessTokenHash != "" {
		if err := idt.VerifyAccessToken(tok.AccessToken); err != nil {
			return 0, "", fmt.Errorf("%w: at_hash: %w", ErrLoginFailed, err)
		}
	}
	var c profileClaims
	if err := idt.Claims(&c); err != nil {
		return 0, "", fmt.Errorf("%w: id token claims: %w", ErrLoginFailed, err)
	}
	if idt.Subject == "" {
		return 0, "", fmt.Errorf("%w: id token without subject", ErrLoginFailed)
	}
	u, err := q.UserUpsert(ctx, db.UserUpsertParams{Issuer: idt.Issuer, Subject: idt.Subject, Email: c.email(), Name: c.name()})
	if err != nil {
		return 0, "", fmt.Errorf("%w: record user: %w", ErrLoginFailed, err)
	}
	return u.ID, login.ReturnTo, nil
}

// AuthenticateToken returns the principal for an OIDC bearer token: a JWT
// signed by the issuer, naming the client id as audience and not expired.
// A user seen first through a token is created. Any invalid token is
// ErrUnauthenticated.
func (o *OIDC) AuthenticateToken(ctx context.Context, raw string) (*Principal, error) {
	if raw == "" {
		return nil, ErrUnauthenticated
	}
	t, err := o.verifier.Verify(ctx, raw)
	if err != nil && o.cliVerifier != nil {
		// The same issuer and keys; only the audience differs.
		t, err = o.cliVerifier.Verify(ctx, raw)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnauthenticated, err)
	}
	if t.Subject == "" {
		return nil, ErrUnauthenticated
	}
	q := db.New(o.pool)
	id := db.UserGetByIdentityParams{Issuer: t.Issuer, Subject: t.Subject}
	u, err := q.UserGetByIdentity(ctx, id)
	if errors.Is(err, db.ErrNotFound) {
		var c profileClaims
		_ = t.Claims(&c) // optional claims: a token without them still names a user
		err = q.UserCreateIfMissing(ctx, db.UserCreateIfMissingParams{Issuer: t.Issuer, Subject: t.Subject, Email: c.email(), Name: c.name()})
		if err == nil {
			u, err = q.UserGetByIdentity(ctx, id)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("authenticate token: %w", err)
	}
	return LoadUser(ctx, q, u.ID, "oidc-token")
}

// Sweep deletes sign-ins started more than LoginMaxAge ago and never
// finished; it returns how many.
func (o *OIDC) Sweep(ctx context.Context) (int64, error) {
	n, err := db.New(o.pool).OIDCLoginDeleteOld(ctx, o.clock.Now().Add(-LoginMaxAge))
	if err != nil {
		return 0, fmt.Errorf("sweep logins: %w", err)
	}
	return n, nil
}

// profileClaims are the optional identity claims we keep on the user row.
type profileClaims struct {
	Email             string `json:"email"`
	EmailVerified     any    `json:"email_verified"`
	Name              string `json:"name"`
	PreferredUsername string `json:"preferred_username"`
}

// email is the token's email when the IdP vouches for it (email_verified
// true, or "true" as some IdPs send it), else "". An IdP that lets people
// type any address would otherwise let one claim a colleague's email and be
// added to teams in their name.
func (c profileClaims) email() string {
	switch v := c.EmailVerified.(type) {
	case bool:
		if v {
			return c.Email
		}
	case string:
		if v == "true" {
			return c.Email
		}
	}
	return ""
}

func (c profileClaims) name() string {
	if c.Name != "" {
		return c.Name
	}
	return c.PreferredUsername
}

// LocalPath returns p when it is a path on this site, else "/". It refuses
// "//host" and "/\host", which browsers follow to another host.
func LocalPath(p string) string {
	if !strings.HasPrefix(p, "/") || strings.HasPrefix(p, "//") || strings.ContainsAny(p, "\\\r\n\t") {
		return "/"
	}
	u, err := url.Parse(p)
	if err != nil || u.Scheme != "" || u.Host != "" {
		return "/"
	}
	return p
}

// randomToken returns 256 random bits, base64url.
func randomToken() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// AuthOrigin is the scheme://host[:port] of the provider's authorization
// endpoint: the sign-in page's CSP must let its form post redirect there.
func (o *OIDC) AuthOrigin() string {
	u, err := url.Parse(o.oauth.Endpoint.AuthURL)
	if err != nil || u.Host == "" {
		return ""
	}
	return u.Scheme + "://" + u.Host
}
