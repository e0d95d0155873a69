// Package devidp is a development identity provider that speaks real OpenID
// Connect (discovery, authorize, token, JWKS, userinfo), for `modelplane dev`
// and for tests. It wraps github.com/oauth2-proxy/mockoidc and adds what that
// server lacks for our use: a fixed list of demo users chosen per login with
// the standard login_hint parameter (or on a small sign-in page), mandatory
// PKCE S256, serialised access to mockoidc's unsynchronised state, and a way
// for tests to mint signed tokens with chosen claims.
//
// It listens only on loopback and must never be used as a production IdP:
// anyone who can reach it signs in as anyone.
//
// It must not import auth or db: auth's tests import it.
package devidp
