package gateway

import (
	"crypto/tls"
	"errors"
	"net/http"

	"modelplane/tlscert"
)

// A client certificate authenticates a service of a team. The listener
// (app, MP_GATEWAY_CLIENT_CA) verified it against the client CAs; here its
// one SPIFFE URI SAN, spiffe://<trust-domain>/team/<team>/sa/<name>, is
// mapped onto the team's active API key named <name>: the service acts as
// that key (its team, role, expiry and rate-limit bucket), and revoking the
// key, its expiry, its creator leaving the team or the team's deletion
// (which delete the key's mp_keys entry) end the certificate's access too.
// There is no second list of identities to keep in step with the keys.

// serviceKey is keyTable.byService's key of team's keys named name.
func serviceKey(team, name string) string { return team + "\x00" + name }

// authenticateCert authenticates a request that came with a client
// certificate; a certificate that maps to no active key is 401 naming the
// identity and why, even when the request also carries an API key.
func (g *Gateway) authenticateCert(w http.ResponseWriter, c *call, st *tls.ConnectionState) (*caller, bool) {
	refuse := func(detail string) (*caller, bool) {
		g.fail(w, c, http.StatusUnauthorized, "unauthenticated", detail)
		return nil, false
	}
	if len(st.VerifiedChains) == 0 {
		// The listener verifies every certificate it is given; one that
		// was not (a listener asking without verifying) is nobody.
		return refuse("the client certificate was not verified against the gateway's client CAs")
	}
	td := g.cfg.ClientTrustDomain
	if td == "" {
		return refuse("this gateway authenticates no client certificate (no trust domain configured); send an API key instead")
	}
	id, err := tlscert.ServiceOf(st.PeerCertificates[0])
	if errors.Is(err, tlscert.ErrNoServiceID) {
		return refuse("the client certificate names no service identity: its URI SAN must be spiffe://" + td + "/team/<team>/sa/<name>")
	}
	if err != nil {
		return refuse("the client certificate's identity is not valid: " + err.Error())
	}
	if id.TrustDomain != td {
		return refuse("the client certificate's identity " + id.String() + " is not of this gateway's trust domain " + td)
	}
	var found *key
	n := 0
	for _, k := range g.keys.Load().byService[serviceKey(id.Team, id.Name)] {
		if k.expiresAt != nil && !g.now().Before(*k.expiresAt) {
			continue
		}
		found, n = k, n+1
	}
	switch {
	case n == 0:
		return refuse("the client certificate's identity " + id.String() + " is no service of team " + id.Team +
			": the team has no active API key named " + id.Name + " (unknown, revoked or expired)")
	case n > 1:
		return refuse("the client certificate's identity " + id.String() + " is ambiguous: team " + id.Team +
			" has several active API keys named " + id.Name + "; revoke all but one")
	}
	return &caller{name: found.src.Prefix, team: found.team, role: found.role}, true
}
