// Package ingest owns the ClickHouse side of modelplane: the connection, and
// the JetStream consumers that land what agents and gateways publish in
// ClickHouse exactly once.
//
// Usage is the MP_USAGE consumer: it prices each per-second GPU allocation
// record at the rate in force at that second and writes gpu_usage (and so,
// through its materialised view, the hourly rollup). The ledger bills each
// slot-second once: gpu_usage holds at most one row per (node, GPU and
// slice or CPU core, replica, second), whatever batch ids an agent puts on
// them. Exactly once rests on that one rule: no row whose slot-second is
// already stored is ever inserted. Before each insert the consumer sorts
// the rows it holds into those gpu_usage certainly lacks and those it may
// hold, and asks ClickHouse about the second kind only, with a query
// narrowed by the table's sort key (the nodes and the runs of seconds they
// cover); it keeps only the first of several held rows of one
// slot-second; only then does it insert, and only after ClickHouse
// accepted the insert does it ack. The sorting is the memory of one run
// (ledgerMemory, usage_known.go): at its first store after Start the run
// reads, per node, the newest second of the last hour gpu_usage holds, and
// it notes every slot-second it is handed before storing it; a row above
// its node's newest second and its slot's newest noted one is stored
// nowhere, since under the lease no one else inserts, and is the first of
// its slot-second in its set. A set with no row to look up therefore needs
// no comparing at all. Live rows are such rows, so only
// redeliveries, repeats, late replays and rows older than the hour are
// looked up (docs/security.md has the case by case argument). A
// redelivery after a crash, a batch an
// agent replays after the JetStream duplicate window, or an operator
// replaying the stream find their rows stored under their own (batch_id,
// row_idx) and are skipped as duplicates; a row stored under another batch
// is a repeat (a node billing a second twice) and is dropped and counted
// (mp_ingest_usage_repeated_rows_total, logged per node). So
// ReplacingMergeTree is not needed, and the rollup, which fires on insert,
// never sees a second twice. Rows are never compared by content: two
// identical seconds of two idle slots are two rows.
//
// The rollup needs one more rule. On ClickHouse 18.16 an insert writes
// gpu_usage's part, then the view's; an insert that fails in between
// (ClickHouse killed, the view's SELECT refused) leaves rows stored that
// the rollup never saw, and the redelivery skips them as stored. So the
// consumer notes the hours of every insert that failed, and once ClickHouse
// answers again, or every RepairInterval, RepairRollup compares the
// rollup with gpu_usage key by key over those hours and inserts what the
// rollup lacks. Each start does the same for the last RepairWindow, for a
// process that died with a repair pending. A repair only adds: its reads
// are ordered, and it gives up while an insert of this package is running
// or a row arrives under it, so a concurrent insert is never counted
// twice (RepairRollup says why).
//
// Check-then-insert is only atomic while one process consumes: run one Usage
// per durable consumer, under a leader lease (db.Lease starting and stopping Usage).
// Inside the process, batches of one node always go to the same worker, so
// concurrent inserts never race on one slot-second; the same single consumer
// keeps two repairs of one database from running at once.
//
// Usage believes an agent about its own node's measurements (utilisation,
// memory, requests) but not about whom a second bills: each record is
// attributed by the control plane's allocation interval that covers its
// slot (a CPU replica's cores) at its second, which gives the team,
// endpoint, model, version, GPU type and profile; the agent's labels are
// overwritten, and a record no interval covers, or whose slot another
// replica held, is dropped and counted, never billed. The intervals are
// cached (allocations.go) and read again, incrementally, only when a
// decision depends on a change the cache may not have seen yet.
//
// ingest never writes PostgreSQL and holds no business rules beyond pricing
// and attributing a second; rates and allocation intervals come from the
// caller (package billing).
package ingest
