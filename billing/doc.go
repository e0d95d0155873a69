// Package billing owns the money side of GPU metering: the table of GPU cost
// rates (micro-USD per hour for one GPU type and allocation profile, each in
// force from its effective time on) and the rule that picks the rate of one
// second. Rates are integers in micro-USD; nothing here sums money in floats.
//
// billing reads rates from PostgreSQL through the generated queries in db.
// Book writes them: a rate change is a new cost_rates row (with its audit
// record), never an update, and it must take effect at least RateLead ahead,
// so no second already metered is ever repriced. billing never touches NATS. It reads usage back from
// ClickHouse (Meter) but never writes it: package ingest does. The ingest consumer
// prices each usage second with a table from here at insert time, so a rate
// must be entered before the seconds it applies to are ingested: a rate
// back-dated after the fact does not reprice rows already stored.
package billing
