// Package trust decides what the control plane believes of a node agent
// (DESIGN.md section 18): an agent speaks only about its own node. NATS
// permissions let node N publish only on N's subject; the checks here hold
// even where they are missing: the node of a heartbeat is its subject's
// (SubjectNode), and a replica's address must be on the address the
// platform registered for the node (OnNode), not where the agent says.
// A node's hardware is believed only up to what a platform admin attested
// (Attestations, Check, Judge). Metrics counts what was refused.
//
// It owns the rules and the platform's record of a node's address, not the
// heartbeat path: package fleet's intake calls it for every heartbeat. It
// must not take anything a heartbeat says as the platform's record.
package trust
