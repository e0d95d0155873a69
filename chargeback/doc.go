// Package chargeback owns the reports finance and teams read about GPU cost:
// usage and cost over a period grouped by team, endpoint, model, version, GPU
// type, allocation profile and caller team, with totals, the CSV finance
// pastes into a spreadsheet, the daily cost series and top endpoints the
// portal charts. The caller team splits an endpoint's cost among the teams
// granted it by their share of its requests (tokens for LLMs) in each hour,
// rounded down on the exact numerator, the owners keeping the rest
// (apportion.go).
//
// The money rule (docs/chargeback.md). Every usage second was stamped at
// ingest with the rate in force at that second (package billing), so its
// exact cost is rate_uusd_per_hour/3600 micro-USD. Sums are kept exact as
// the numerator, Σ rate_uusd_per_hour ("µUSD × 3600"), which the raw table
// and the hourly rollup both sum in integers. A report's total is that
// numerator divided by 3600 and rounded once, half up, to the micro-dollar;
// it depends only on the seconds in the period, never on the grouping or on
// whether rows came from the rollup or the raw table. Each group's micro-USD
// is its exact cost rounded down, plus one micro-dollar for the groups with
// the largest remainders until the groups add up to the total (largest
// remainder), so the rows of a report always add up to its total.
//
// Sealed days are read from gpu_usage_daily (Sealer rebuilds each day
// from the hourly rollup once it is older than the usage stream's
// retention, and a day is used only while its rows add up to its seal),
// other whole hours from the hourly rollup, and the partial hours at the
// ends of a period from the raw per-second table, so any period is exact to
// the second and a month costs a few thousand rows.
//
// Scoping: finance and platform admins see every team and the unallocated
// (idle) GPU time; everyone else sees only their teams' rows, and the totals
// are summed from those rows alone.
//
// Budgets (monthly, per team or endpoint) live in PostgreSQL with their
// alerts; a checker raises the 80 and 100 percent alerts (audit log, and a
// proto.Event for mp.events.<team> as an outbox row in the same
// transaction). The fleet reconciler reads the stored 100 percent alerts of
// blocking budgets from PostgreSQL (package fleet, query BudgetBlockingList)
// and starts no replica beyond an endpoint's minimum. Nothing here stops a
// replica. Advisor turns the last week of
// usage into right-sizing advice. chargeback writes ClickHouse only to seal
// days (never the usage itself) and imports no HTTP or templ package.
package chargeback
