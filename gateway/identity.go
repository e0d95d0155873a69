package gateway

import (
	"context"
	"crypto"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/coder/quartz"
	"github.com/coreos/go-oidc/v3/oidc"
	jose "github.com/go-jose/go-jose/v4"

	"modelplane/busapi"
)

// maxTokenBytes bounds a bearer token the gateway tries to verify.
const maxTokenBytes = 16 << 10

// identityTable is an immutable view of mp_identity: the token verifier
// (nil until the control plane published the issuer's keys) and the users'
// memberships by IdentityUserKey.
type identityTable struct {
	oidc    *tokenVerifier
	members map[string]*busapi.MemberEntry
}

// tokenVerifier checks a token's signature against the published keys, and
// its iss, aud and exp, with no network call.
type tokenVerifier struct {
	src busapi.OIDCEntry
	v   *oidc.IDTokenVerifier
	// cli verifies the tokens of the command-line client's audience; nil
	// when the entry names none.
	cli *oidc.IDTokenVerifier
}

// signingAlgs are the algorithms accepted for tokens.
var signingAlgs = []string{oidc.RS256, oidc.RS384, oidc.RS512, oidc.ES256, oidc.ES384, oidc.ES512, oidc.PS256, oidc.PS384, oidc.PS512, oidc.EdDSA}

// newTokenVerifier builds the verifier of an OIDCEntry; clock is what exp
// is checked on.
func newTokenVerifier(e busapi.OIDCEntry, clock quartz.Clock) (*tokenVerifier, error) {
	if e.Issuer == "" || e.Audience == "" {
		return nil, errors.New("oidc entry names no issuer or audience")
	}
	var set jose.JSONWebKeySet
	if err := json.Unmarshal(e.JWKS, &set); err != nil {
		return nil, fmt.Errorf("oidc entry keys: %w", err)
	}
	var keys []crypto.PublicKey
	for _, k := range set.Keys {
		if k.Use != "" && k.Use != "sig" {
			continue
		}
		keys = append(keys, k.Public().Key)
	}
	if len(keys) == 0 {
		return nil, errors.New("oidc entry holds no signing key")
	}
	verifier := func(aud string) *oidc.IDTokenVerifier {
		return oidc.NewVerifier(e.Issuer, &oidc.StaticKeySet{PublicKeys: keys},
			// go-oidc takes its clock as a func.
			&oidc.Config{ClientID: aud, Now: func() time.Time { return clock.Now() }, SupportedSigningAlgs: signingAlgs})
	}
	tv := &tokenVerifier{src: e, v: verifier(e.Audience)}
	if e.CLIAudience != "" {
		tv.cli = verifier(e.CLIAudience)
	}
	return tv, nil
}

// bearerToken returns the token of an Authorization header when it has the
// shape of a JWT (three dot-separated parts) and a sane size.
func bearerToken(header string) (string, bool) {
	scheme, token, found := strings.Cut(header, " ")
	if !found || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, len(token) <= maxTokenBytes && strings.Count(token, ".") == 2
}

// caller is who a request authenticated as: an API key, or a token's user.
type caller struct {
	// name is the key's prefix, or "oidc_" and the start of the user's
	// digest: the per-caller rate-limit bucket and the log's key.
	name string
	// team and role are an API key's; teams and platformRole a user's.
	team, role   string
	teams        []busapi.MemberTeam
	platformRole string
	token        bool
}

// may reports whether the caller may use an endpoint of team.
func (c *caller) may(team string) bool {
	if !c.token {
		return c.team == team || c.team == "" && c.role == rolePlatformAdmin
	}
	if c.platformRole == rolePlatformAdmin {
		return true
	}
	for _, m := range c.teams {
		if m.Team == team {
			return true
		}
	}
	return false
}

// verifyToken authenticates an OIDC bearer token locally; ok is false for
// any token that fails (no keys published yet, bad signature, wrong iss or
// aud, expired, no subject). A valid token of a user with no membership is
// a caller of no team.
func (g *Gateway) verifyToken(ctx context.Context, raw string) (*caller, bool) {
	id := g.identity.Load()
	if id.oidc == nil {
		return nil, false
	}
	t, err := id.oidc.v.Verify(ctx, raw)
	if err != nil && id.oidc.cli != nil {
		t, err = id.oidc.cli.Verify(ctx, raw)
	}
	if err != nil || t.Subject == "" {
		return nil, false
	}
	k := busapi.IdentityUserKey(t.Issuer, t.Subject)
	c := &caller{name: "oidc_" + k[2:18], token: true}
	if m := id.members[k]; m != nil {
		c.teams, c.platformRole = m.Teams, m.PlatformRole
	}
	return c, true
}

// withOIDC returns a copy of t with the verifier v (nil: none).
func (t *identityTable) withOIDC(v *tokenVerifier) *identityTable {
	return &identityTable{oidc: v, members: t.members}
}

// withMember returns a copy of t with key set to m (nil: removed).
func (t *identityTable) withMember(key string, m *busapi.MemberEntry) *identityTable {
	ms := maps.Clone(t.members)
	if m == nil {
		delete(ms, key)
	} else {
		ms[key] = m
	}
	return &identityTable{oidc: t.oidc, members: ms}
}
