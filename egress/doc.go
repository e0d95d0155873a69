// Package egress is the one allow-list for the outbound calls the platform
// makes on its operator's behalf to addresses that users or configuration
// name: external https:// artifact URIs and OIDC discovery and keys. It
// owns the rule (https only, hosts the operator listed, never a loopback,
// link-local, metadata or unspecified address) and an http.Transport that
// applies it to the address actually dialled, after DNS, so a name that is
// on the list but resolves (or rebinds) to an internal address is refused.
// It must not import any domain package.
package egress
