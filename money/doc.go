// Package money writes amounts of micro-USD (the integer unit every cost,
// rate and budget is kept in) as text: USD, the exact six-place decimal the
// API and the CSV carry, and Dollars, the dollars-and-cents figure people
// read in the portal, budget alerts and the fleet's budget holds.
//
// It is a pure leaf: standard library only, no I/O, no domain package.
// chargeback, fleet and handlers all format money through it, so the
// display rounding is defined once and fleet need not import chargeback
// for it (the import-direction test in internal/arch forbids that arrow).
package money
