// Package quota owns team quotas: what a team's replicas may hold of one
// resource (a GPU type in GPU equivalents, CPU cores, or MiB of host
// memory), who set it, and how usage is counted against it (Units,
// ReplicaUses, ResultUses). The
// Service keeps the quotas and the tiers granted to teams (a critical
// endpoint is placed as critical only with its team's grant), platform
// admins only, audited; Table is one reconcile pass's read of the quotas,
// with the operator's default for teams without one.
//
// It decides what a quota is and whether an amount exceeds it, not where
// replicas go: package fleet's reconciler caps what it places by a Table
// (and preempts lower tiers within it). It must not place or remove
// replicas itself.
package quota
