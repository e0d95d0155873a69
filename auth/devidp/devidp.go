package devidp

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"maps"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/oauth2-proxy/mockoidc"
)

// User is a person the IdP can sign in.
type User struct {
	Subject     string // the sub claim, stable per user
	Email       string // also the login_hint that selects the user
	Name        string
	Description string // one line for a sign-in page

	// Where the user sits in the demo data, for the dev command to seed:
	// PlatformRole is "platform_admin", "finance" or ""; TeamRole is
	// "admin", "engineer", "viewer" or "" (no team).
	PlatformRole string
	Team         string
	TeamRole     string

	// Claims are added to, and override, the standard claims of the user's
	// ID tokens and of TokenClaims. Tests use them to get tokens with a wrong
	// aud, iss, exp or nonce out of a real code flow. Times are Unix seconds.
	Claims map[string]any
}

// DemoUsers returns the fixed people of the demo data, one per kind of
// access the portal distinguishes.
func DemoUsers() []User {
	return []User{
		{Subject: "demo-admin", Email: "admin@example.com", Name: "Ada Admin", PlatformRole: "platform_admin",
			Description: "Platform admin: sees and changes every team, the fleet and cost rates."},
		{Subject: "demo-risk-admin", Email: "risk-admin@example.com", Name: "Rita Risk", Team: "risk", TeamRole: "admin",
			Description: "Admin of team risk: manages its members, API keys and endpoints, approves its rollouts."},
		{Subject: "demo-risk-engineer", Email: "risk-engineer@example.com", Name: "Ravi Engineer", Team: "risk", TeamRole: "engineer",
			Description: "Engineer in team risk: registers model versions, creates endpoints, starts rollouts."},
		{Subject: "demo-risk-viewer", Email: "risk-viewer@example.com", Name: "Vera Viewer", Team: "risk", TeamRole: "viewer",
			Description: "Viewer in team risk: reads its endpoints, rollouts and usage, changes nothing."},
		{Subject: "demo-search-admin", Email: "search-admin@example.com", Name: "Sam Search", Team: "search", TeamRole: "admin",
			Description: "Admin of team search: cannot see anything of team risk."},
		{Subject: "demo-finance", Email: "finance@example.com", Name: "Fiona Finance", PlatformRole: "finance",
			Description: "Finance: reads GPU chargeback for every team, changes nothing."},
	}
}

// Config says where the IdP listens and whom it knows.
type Config struct {
	// Addr is a loopback host:port; "" means 127.0.0.1 on a free port.
	Addr string
	// ClientID and ClientSecret of the one client; "" means random.
	ClientID     string
	ClientSecret string
	// Users who may sign in; nil means DemoUsers().
	Users []User
	// RedirectURLs, when set, are the only redirect_uri values authorize
	// accepts, as a real IdP's client registration would be.
	RedirectURLs []string
	// Key signs tokens; nil means a fresh 2048-bit RSA key, so tokens of one
	// IdP never verify against another.
	Key *rsa.PrivateKey
	// PublicClients are the ids of public clients (no secret), such as the
	// command-line client's: registered with loopback redirects on any
	// port (RFC 8252 section 7.3), PKCE S256 required, refresh tokens
	// issued. Their tokens name them as aud.
	PublicClients []string
}

// IdP is a running development identity provider.
type IdP struct {
	m         *mockoidc.MockOIDC
	redirects []string
	public    []string
	// codes binds each code issued to a public client to that client.
	codes map[string]string

	// mu serialises every request into mockoidc, whose session map, code
	// grant flag and user queue are not synchronised, and guards users. Held
	// across QueueUser and the authorize handler, it also pairs each queued
	// user with the request that queued it.
	mu    sync.Mutex
	users []User
}

// Start listens on cfg.Addr and serves OIDC until Close.
func Start(cfg Config) (*IdP, error) {
	addr := cfg.Addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("devidp: address %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return nil, fmt.Errorf("devidp: address %q is not loopback", addr)
	}
	key := cfg.Key
	if key == nil {
		if key, err = rsa.GenerateKey(rand.Reader, 2048); err != nil {
			return nil, fmt.Errorf("devidp: key: %w", err)
		}
	}
	m, err := mockoidc.NewServer(key)
	if err != nil {
		return nil, fmt.Errorf("devidp: %w", err)
	}
	if cfg.ClientID != "" {
		m.ClientID = cfg.ClientID
	}
	if cfg.ClientSecret != "" {
		m.ClientSecret = cfg.ClientSecret
	}
	// mockoidc checks a code_verifier only when the authorize request had a
	// challenge and also allows "plain"; serve() makes S256 mandatory.
	m.CodeChallengeMethodsSupported = []string{mockoidc.CodeChallengeMethodS256}
	// KeyID caches the kid on first use; compute it now so concurrent signing
	// only reads it.
	if _, err := m.Keypair.KeyID(); err != nil {
		return nil, fmt.Errorf("devidp: %w", err)
	}
	users := cfg.Users
	if users == nil {
		users = DemoUsers()
	}
	p := &IdP{m: m, redirects: cfg.RedirectURLs, public: slices.Clone(cfg.PublicClients), codes: map[string]string{}, users: slices.Clone(users)}
	if err := m.AddMiddleware(p.serve); err != nil {
		return nil, fmt.Errorf("devidp: %w", err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("devidp: %w", err)
	}
	if err := m.Start(ln, nil); err != nil {
		ln.Close()
		return nil, fmt.Errorf("devidp: %w", err)
	}
	return p, nil
}

// Close stops the server.
func (p *IdP) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return p.m.Server.Shutdown(ctx)
}

// Issuer is the issuer URL relying parties discover the IdP from.
func (p *IdP) Issuer() string { return p.m.Issuer() }

// ClientID is the one client's id, and the aud of every token issued.
func (p *IdP) ClientID() string { return p.m.ClientID }

// ClientSecret is the one client's secret.
func (p *IdP) ClientSecret() string { return p.m.ClientSecret }

// Users returns the people who may sign in, in sign-in page order.
func (p *IdP) Users() []User {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.users)
}

// AddUser lets u sign in, replacing any user with the same email.
func (p *IdP) AddUser(u User) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := range p.users {
		if strings.EqualFold(p.users[i].Email, u.Email) {
			p.users[i] = u
			return
		}
	}
	p.users = append(p.users, u)
}

// user finds a user by email; the caller holds p.mu.
func (p *IdP) user(email string) (User, bool) {
	for _, u := range p.users {
		if strings.EqualFold(u.Email, email) {
			return u, true
		}
	}
	return User{}, false
}

// TokenClaims returns the claims of a token for u valid for ttl from now:
// iss, aud (the client id), sub, iat, exp, email, email_verified and name,
// then u.Claims. Tests change them and pass them to Sign.
func (p *IdP) TokenClaims(u User, ttl time.Duration) map[string]any {
	now := time.Now()
	c := map[string]any{
		"iss":            p.Issuer(),
		"aud":            p.ClientID(),
		"sub":            u.Subject,
		"iat":            now.Unix(),
		"exp":            now.Add(ttl).Unix(),
		"email":          u.Email,
		"email_verified": true,
		"name":           u.Name,
	}
	maps.Copy(c, u.Claims)
	return c
}

// Sign returns a JWT with the claims, signed RS256 with the IdP's key and
// carrying its kid, as its own tokens are.
func (p *IdP) Sign(claims map[string]any) (string, error) {
	return p.m.Keypair.SignJWT(jwt.MapClaims(claims))
}

// serve wraps every mockoidc endpoint.
func (p *IdP) serve(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case mockoidc.AuthorizationEndpoint:
			p.authorize(w, r, next)
			return
		case mockoidc.TokenEndpoint:
			if r.ParseForm() == nil && slices.Contains(p.public, r.Form.Get("client_id")) {
				p.publicToken(w, r, next)
				return
			}
			// mockoidc advertises client_secret_basic but reads the client
			// credentials only from the form; copy them over. RFC 6749 2.3.1
			// form-encodes both before they go into the header.
			if id, secret, ok := r.BasicAuth(); ok && r.ParseForm() == nil && r.Form.Get("client_id") == "" {
				id, _ = url.QueryUnescape(id)
				secret, _ = url.QueryUnescape(secret)
				r.Form.Set("client_id", id)
				r.Form.Set("client_secret", secret)
			}
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		if r.URL.Path == mockoidc.TokenEndpoint && r.ParseForm() == nil && p.codes[r.Form.Get("code")] != "" {
			oauthError(w, "invalid_grant", "the code was not issued to this client", http.StatusBadRequest)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// authorize picks the user from login_hint (or shows the sign-in page when
// there is none), requires PKCE S256, then lets mockoidc issue the code.
func (p *IdP) authorize(w http.ResponseWriter, r *http.Request, next http.Handler) {
	if err := r.ParseForm(); err != nil {
		oauthError(w, "invalid_request", "bad form", http.StatusBadRequest)
		return
	}
	client := r.Form.Get("client_id")
	public := slices.Contains(p.public, client)
	if public && !loopback(r.Form.Get("redirect_uri")) {
		oauthError(w, "invalid_request", "a public client redirects to a loopback address (RFC 8252)", http.StatusBadRequest)
		return
	}
	if !public && len(p.redirects) > 0 && !slices.Contains(p.redirects, r.Form.Get("redirect_uri")) {
		oauthError(w, "invalid_request", "unregistered redirect_uri", http.StatusBadRequest)
		return
	}
	if r.Form.Get("code_challenge") == "" || r.Form.Get("code_challenge_method") != mockoidc.CodeChallengeMethodS256 {
		oauthError(w, "invalid_request", "PKCE with code_challenge_method=S256 is required", http.StatusBadRequest)
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	hint := r.Form.Get("login_hint")
	if hint == "" {
		p.signInPage(w, r, http.StatusOK, "")
		return
	}
	u, ok := p.user(hint)
	if !ok {
		p.signInPage(w, r, http.StatusBadRequest, "No such user: "+hint)
		return
	}
	p.m.QueueUser(mockUser{u})
	if !public {
		next.ServeHTTP(w, r)
		return
	}
	// mockoidc knows one client: it answers as the public one, and the
	// code it issues is bound to that client.
	rec := &redirectRecorder{ResponseWriter: w}
	p.asClient(client, func() { next.ServeHTTP(rec, r) })
	if loc, err := url.Parse(rec.Header().Get("Location")); err == nil && loc.Query().Get("code") != "" {
		p.codes[loc.Query().Get("code")] = client
	}
}

// asClient runs fn with mockoidc answering as client: the id it checks and
// the aud of the tokens it signs. The caller holds p.mu.
func (p *IdP) asClient(client string, fn func()) {
	id := p.m.ClientID
	p.m.ClientID = client
	defer func() { p.m.ClientID = id }()
	fn()
}

// publicToken serves the token endpoint for a public client: no secret
// (mockoidc's own is filled in), a code only of this client, and the
// PKCE verifier required.
func (p *IdP) publicToken(w http.ResponseWriter, r *http.Request, next http.Handler) {
	client := r.Form.Get("client_id")
	p.mu.Lock()
	defer p.mu.Unlock()
	switch r.Form.Get("grant_type") {
	case "authorization_code":
		code := r.Form.Get("code")
		if p.codes[code] != client {
			oauthError(w, "invalid_grant", "the code was not issued to this client", http.StatusBadRequest)
			return
		}
		if r.Form.Get("code_verifier") == "" {
			oauthError(w, "invalid_grant", "a public client sends its PKCE code_verifier", http.StatusBadRequest)
			return
		}
		delete(p.codes, code)
	case "refresh_token":
	default:
		oauthError(w, "unsupported_grant_type", "authorization_code or refresh_token", http.StatusBadRequest)
		return
	}
	r.Form.Set("client_secret", p.m.ClientSecret)
	p.asClient(client, func() { next.ServeHTTP(w, r) })
}

// loopback reports whether u is an http URL on a loopback address, on any
// port.
func loopback(u string) bool {
	ru, err := url.Parse(u)
	if err != nil || ru.Scheme != "http" {
		return false
	}
	if ru.Hostname() == "localhost" {
		return true
	}
	ip := net.ParseIP(ru.Hostname())
	return ip != nil && ip.IsLoopback()
}

// redirectRecorder passes a response through and keeps its headers for
// the caller to read the Location of.
type redirectRecorder struct{ http.ResponseWriter }

var signIn = template.Must(template.New("signin").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Development sign-in</title></head>
<body style="font-family: sans-serif; max-width: 40em; margin: 2em auto">
<h1>Development sign-in</h1>
<p>This identity provider is for development only. Choose who you are.</p>
{{if .Error}}<p role="alert">{{.Error}}</p>{{end}}
<ul>
{{range .Users}}<li><a href="{{.URL}}">{{.Name}} &lt;{{.Email}}&gt;</a><br>{{.Description}}</li>
{{end}}</ul>
</body></html>
`))

// signInPage lists the users, each linking back to authorize with the same
// parameters plus its login_hint. The caller holds p.mu.
func (p *IdP) signInPage(w http.ResponseWriter, r *http.Request, status int, msg string) {
	type row struct{ Name, Email, Description, URL string }
	var rows []row
	for _, u := range p.users {
		q := maps.Clone(r.Form)
		q.Set("login_hint", u.Email)
		rows = append(rows, row{u.Name, u.Email, u.Description, mockoidc.AuthorizationEndpoint + "?" + q.Encode()})
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	signIn.Execute(w, struct {
		Error string
		Users []row
	}{msg, rows})
}

func oauthError(w http.ResponseWriter, code, description string, status int) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]string{"error": code, "error_description": description})
}

// mockUser adapts User to mockoidc, adding the name claim mockoidc's own
// MockUser lacks and applying User.Claims.
type mockUser struct{ u User }

func (m mockUser) ID() string { return m.u.Subject }

func (m mockUser) Userinfo(scopes []string) ([]byte, error) {
	info := map[string]any{"sub": m.u.Subject}
	m.scoped(scopes, info)
	return json.Marshal(info)
}

func (m mockUser) Claims(scopes []string, base *mockoidc.IDTokenClaims) (jwt.Claims, error) {
	b, err := json.Marshal(base)
	if err != nil {
		return nil, err
	}
	var c jwt.MapClaims
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, err
	}
	if c == nil {
		return nil, errors.New("devidp: empty base claims")
	}
	m.scoped(scopes, c)
	maps.Copy(c, m.u.Claims)
	return c, nil
}

// scoped adds the claims the granted scopes allow.
func (m mockUser) scoped(scopes []string, c map[string]any) {
	for _, s := range scopes {
		switch s {
		case "email":
			c["email"] = m.u.Email
			c["email_verified"] = true
		case "profile":
			c["name"] = m.u.Name
			c["preferred_username"] = m.u.Email
		}
	}
}
