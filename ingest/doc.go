// Package ingest owns the ClickHouse side of modelplane: the connection, and
// the JetStream consumers that land what agents and gateways publish in
// ClickHouse exactly once.
//
// Usage is the MP_USAGE consumer: it prices each per-second GPU allocation
// record at the rate in force at that second and writes gpu_usage (and so,
// through its materialised view, the hourly rollup). Exactly once rests on
// one rule: no row whose (batch_id, row_idx) is already stored is ever
// inserted again. Before each insert the consumer asks ClickHouse which of
// the batches it holds are already there, with a query narrowed by the
// table's primary key, and it drops repeats within what it holds; only then
// does it insert, and only after ClickHouse accepted the insert does it ack.
// A redelivery after a crash, a batch an agent replays after the JetStream
// duplicate window, or an operator replaying the stream are all skipped, so
// ReplacingMergeTree is not needed and the rollup, which fires on insert,
// never sees a duplicate. Rows are never compared by content: two identical
// seconds of two idle GPUs are two rows.
//
// Check-then-insert is only atomic while one process consumes: run one Usage
// per durable consumer, under a leader lease (db.Lead calling Usage.Run).
// Inside the process, batches of one node always go to the same worker, so
// concurrent inserts never race on one batch.
//
// ingest never writes PostgreSQL and holds no business rules beyond pricing
// a second; rates come from the caller (package billing).
package ingest
