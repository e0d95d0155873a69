// Package agent is the node agent: one per GPU machine, it runs the replicas
// the control plane places there and reports what it sees, talking to
// nothing but NATS (DESIGN.md section 5; the contract is package
// busapi).
//
// It owns:
//   - the node's inventory (ParseInventory): GPUs indexed in order, a GPU
//     without MIG as one "full" slice, a MIG GPU as its partitions, with the
//     compute (7) and memory (8) slice budgets of an 80 GB GPU checked;
//   - the reconcile loop: it watches the node's key in KV mp_desired and
//     makes the running replicas match, level-triggered and idempotent. A
//     generation at or below the applied one is stale or replayed and
//     changes nothing; a deleted key or an empty set stops everything. A
//     replica whose slots do not fit the inventory, or overlap another's,
//     is reported failed and not started. A replica that fails to start is
//     retried with an exponential backoff (1 s doubling to 5 minutes);
//   - heartbeats (proto.NodeStatus on mp.node.<node>.status every few
//     seconds and after every change), skipped and counted while NATS is
//     away;
//   - restart adoption: a state file in the state directory records the
//     applied desired set and each replica's address. A new Agent takes over
//     the replicas its Driver still runs, or probes the recorded address of
//     one another process serves, and starts only what is gone (on its old
//     port when free), so one replica never runs twice. Until NATS answers it
//     serves the recorded set;
//   - metering: every second one proto.Usage per slot of every replica
//     holding slots, idle ones included, batched per second (at most
//     BatchRecords per batch) with the deterministic id BatchID(node, second,
//     chunk) as Nats-Msg-Id, and published to MP_USAGE through a write-ahead
//     spool on disk: a batch leaves the spool only once JetStream acked it,
//     so outages, ack timeouts and kill -9 lose nothing and replays carry
//     the original ids.
//
// Replicas run through a Driver, an interface declared here: SimDriver serves
// each replica as a sim/replica HTTP server on its own loopback port; a
// process or Kubernetes driver can follow. A driver passed in Config outlives
// the Agent, which is how `modelplane dev` and tests restart an agent in one
// process.
//
// Losing NATS never stops a replica: replicas keep serving, heartbeats are
// counted as failed, usage waits in the spool, and the connection (which the
// caller makes, with infinite reconnects) comes back on its own.
//
// Per agent there are two goroutines (the main loop and the meter) besides
// the NATS client's and the replicas' own, and no package-level state, so a
// simulated fleet of hundreds of agents runs in one process. It must not
// import the database, ClickHouse or any HTTP handler package: an agent
// works with the control plane down.
package agent
