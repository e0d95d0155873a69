// Package auth owns identity: who is calling. It verifies API keys, OIDC logins
// and bearer tokens, keeps server-side sessions, and turns each of them into a
// Principal that carries the caller's platform role and team memberships.
//
// It decides nothing about objects: domain packages ask the Principal which
// teams it may read or write and put that scope into their SQL. It must not
// import chi, templ or handlers.
//
// IdentityPublisher hands gateways what they need to verify bearer tokens
// without a database: the issuer's keys and every user's memberships, through
// the outbox to KV mp_identity.
//
// Subpackage devidp is a development OpenID Connect provider with demo users,
// for `modelplane dev` and for tests of this package.
package auth
