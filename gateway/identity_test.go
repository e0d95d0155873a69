package gateway_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"modelplane/auth/devidp"
	"modelplane/busapi"
	"modelplane/gateway"
	"modelplane/internal/natstest"
	"modelplane/internal/wait"
)

// startIdP runs a dev IdP; it is closed when the test ends.
func startIdP(t *testing.T) *devidp.IdP {
	t.Helper()
	idp, err := devidp.Start(devidp.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { idp.Close() })
	return idp
}

// jwksOf fetches an issuer's key set the way the control plane does:
// discovery, then jwks_uri.
func jwksOf(t *testing.T, issuer string) json.RawMessage {
	t.Helper()
	get := func(url string) []byte {
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d %v", url, resp.StatusCode, err)
		}
		return b
	}
	var disc struct {
		JWKSURL string `json:"jwks_uri"`
	}
	if err := json.Unmarshal(get(strings.TrimSuffix(issuer, "/")+"/.well-known/openid-configuration"), &disc); err != nil {
		t.Fatal(err)
	}
	return get(disc.JWKSURL)
}

// putIdentity publishes one mp_identity entry (nil deletes it).
func putIdentity(t *testing.T, e *env, key string, v any) {
	t.Helper()
	js, err := jetstream.New(e.nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(t.Context(), busapi.BucketIdentity)
	if err != nil {
		t.Fatal(err)
	}
	if v == nil {
		if err := kv.Delete(t.Context(), key); err != nil {
			t.Fatal(err)
		}
		return
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(t.Context(), key, b); err != nil {
		t.Fatal(err)
	}
}

// TestOIDCBearerTokens: tokens from the dev IdP are verified by the gateway
// alone (signature, iss, aud, exp) and authorised by the user's published
// memberships like an API key of that team; removing a membership reaches
// the gateway within seconds.
func TestOIDCBearerTokens(t *testing.T) {
	t.Parallel()
	idp, other := startIdP(t), startIdP(t)
	e := newEnv(t)
	e.putRoute(t, route("fraud-scoring", "risk", "classification", 1, ver("v1", 100, "10.0.0.1:1")))
	e.putRoute(t, route("ranker", "search", "classification", 1, ver("r1", 100, "10.0.0.2:1")))
	e.newKey(t, "risk", "engineer", nil) // mp_keys is not empty
	users := map[string]devidp.User{}
	for _, u := range idp.Users() {
		users[u.Subject] = u
	}
	eng, admin, searchAdmin := users["demo-risk-engineer"], users["demo-admin"], users["demo-search-admin"]
	putIdentity(t, e, busapi.IdentityOIDCKey, busapi.OIDCEntry{Issuer: idp.Issuer(), Audience: idp.ClientID(), CLIAudience: "modelplane-cli",
		JWKS: jwksOf(t, idp.Issuer())})
	putIdentity(t, e, busapi.IdentityUserKey(idp.Issuer(), eng.Subject), busapi.MemberEntry{Teams: []busapi.MemberTeam{{Team: "risk", Role: "engineer"}}})
	putIdentity(t, e, busapi.IdentityUserKey(idp.Issuer(), admin.Subject), busapi.MemberEntry{PlatformRole: "platform_admin"})
	g := startGateway(t, e.nc, gateway.Config{Transport: instant{}})
	wait.Eventually(t, 10*time.Second, g.Ready, "waiting for gateway ready")

	sign := func(p *devidp.IdP, u devidp.User, mod func(map[string]any)) string {
		c := p.TokenClaims(u, 5*time.Minute)
		if mod != nil {
			mod(c)
		}
		tok, err := p.Sign(c)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	engToken := sign(idp, eng, nil)
	// The verifier arrives by watch: wait for the first token to pass.
	wait.Eventually(t, 10*time.Second, func() bool {
		return call(t, g.url, predictPath("fraud-scoring"), engToken, predictBody).status == http.StatusOK
	}, "waiting for token accepted")
	tampered := engToken[:len(engToken)-4] + "AAAA"
	if strings.HasSuffix(engToken, "AAAA") {
		tampered = engToken[:len(engToken)-4] + "BBBB"
	}
	tests := []struct {
		name, token, endpoint string
		want                  int
	}{
		{"member of the team", engToken, "fraud-scoring", http.StatusOK},
		{"another team's endpoint", engToken, "ranker", http.StatusNotFound},
		{"user in no team", sign(idp, searchAdmin, nil), "ranker", http.StatusNotFound},
		{"platform admin", sign(idp, admin, nil), "ranker", http.StatusOK},
		{"expired", sign(idp, eng, func(c map[string]any) { c["exp"] = time.Now().Add(-time.Minute).Unix() }), "fraud-scoring", http.StatusUnauthorized},
		{"wrong audience", sign(idp, eng, func(c map[string]any) { c["aud"] = "someone-else" }), "fraud-scoring", http.StatusUnauthorized},
		{"the command-line client's token (modelplane login)", sign(idp, eng, func(c map[string]any) { c["aud"] = "modelplane-cli" }), "fraud-scoring", http.StatusOK},
		{"wrong issuer", sign(idp, eng, func(c map[string]any) { c["iss"] = "https://evil.example.com" }), "fraud-scoring", http.StatusUnauthorized},
		{"another issuer's key", sign(other, eng, func(c map[string]any) { c["iss"] = idp.Issuer(); c["aud"] = idp.ClientID() }), "fraud-scoring", http.StatusUnauthorized},
		{"tampered signature", tampered, "fraud-scoring", http.StatusUnauthorized},
		{"not a token", "a.b.c", "fraud-scoring", http.StatusUnauthorized},
	}
	for _, tt := range tests {
		r := call(t, g.url, predictPath(tt.endpoint), tt.token, predictBody)
		if r.status != tt.want {
			t.Errorf("%s: status %d (%s), want %d", tt.name, r.status, r.body, tt.want)
		}
		if tt.want == http.StatusUnauthorized && !strings.Contains(r.header.Get("WWW-Authenticate"), "invalid_token") {
			t.Errorf("%s: WWW-Authenticate %q, want invalid_token", tt.name, r.header.Get("WWW-Authenticate"))
		}
	}

	putIdentity(t, e, busapi.IdentityUserKey(idp.Issuer(), eng.Subject), nil)
	wait.Eventually(t, 10*time.Second, func() bool {
		return call(t, g.url, predictPath("fraud-scoring"), engToken, predictBody).status == http.StatusNotFound
	}, "waiting for membership removal reaches the gateway")
}

// TestTokensFromSnapshot: a gateway started while NATS is down verifies
// tokens with the keys and memberships of its snapshot.
func TestTokensFromSnapshot(t *testing.T) {
	t.Parallel()
	idp := startIdP(t)
	ns := natstest.NewRestartable(t)
	nc := connectRetrying(t, ns.URL())
	e := setupEnv(t, ns.URL(), nc)
	e.putRoute(t, route("fraud-scoring", "risk", "classification", 1, ver("v1", 100, "10.0.0.1:1")))
	e.newKey(t, "risk", "engineer", nil)
	eng := idp.Users()[2]
	putIdentity(t, e, busapi.IdentityOIDCKey, busapi.OIDCEntry{Issuer: idp.Issuer(), Audience: idp.ClientID(), JWKS: jwksOf(t, idp.Issuer())})
	putIdentity(t, e, busapi.IdentityUserKey(idp.Issuer(), eng.Subject), busapi.MemberEntry{Teams: []busapi.MemberTeam{{Team: "risk", Role: "engineer"}}})
	tok, err := idp.Sign(idp.TokenClaims(eng, 5*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	g1 := startGateway(t, nc, gateway.Config{StateDir: dir, Transport: instant{}})
	wait.Eventually(t, 10*time.Second, func() bool {
		return call(t, g1.url, predictPath("fraud-scoring"), tok, predictBody).status == http.StatusOK
	}, "waiting for token accepted")
	// A token passes once routes and identity are synced, but the gateway
	// writes its snapshot only when the keys are too (Ready): never a
	// partial table over a good one.
	wait.Eventually(t, 10*time.Second, g1.Ready, "waiting for gateway ready")
	g1.Stop()
	ns.Shutdown()
	g2 := startGateway(t, connectRetrying(t, ns.URL()), gateway.Config{StateDir: dir, Transport: instant{}})
	if r := call(t, g2.url, predictPath("fraud-scoring"), tok, predictBody); r.status != http.StatusOK {
		t.Errorf("token with NATS down: %d (%s), want 200 from the snapshot", r.status, r.body)
	}
}
