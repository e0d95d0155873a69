// Package grant owns sharing: the call access an endpoint's owners give
// other teams (table endpoint_grants), each grant with the consumer's own
// rate limit, daily request quota and whether its requests may be sampled.
// A grant or revocation is one transaction that writes the grant, its
// audit row and the endpoint's routing entry (package route), so the
// change reaches gateways one outbox relay hop after it commits; gateways
// enforce it from the entry alone. It also answers what is shared with a
// team ("shared with me"), with the models' schemas.
//
// Revoking a grant that inference graphs depend on still revokes it, and
// names those graphs in its answer; which graphs use an endpoint is asked
// of a Dependents, which the graph package supplies (NoGraphs until then).
//
// It does not enforce anything at request time (package gateway does), and
// it never talks to NATS: the outbox relay publishes what it writes.
package grant
