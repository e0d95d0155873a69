// Package enrollment owns how a node becomes part of the fleet and stops
// being one: single-use, expiring join tokens that a platform admin makes
// for one node, their exchange for the node's own NATS credential and
// artifact-download token, and the revocation of both at once. It records
// the node's identity (its NATS user key, its artifact token's digest) and
// the address it may serve replicas on (fleet's node_addresses).
//
// It must not speak for the node afterwards: heartbeats and replica
// addresses are the fleet's to check. It never stores a token or a seed,
// only digests and public keys.
package enrollment
