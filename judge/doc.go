// Package judge decides one evaluation of a rollout: from the request
// statistics of the candidate and of the incumbent over the same window
// (and, when the rollout asks for it, their output drift) it returns
// ROLLBACK, HOLD or ADVANCE with every number it looked at and the threshold
// it held that number to.
//
// It is pure: no clock, no I/O, no randomness. The rollout controller reads
// the windows from request_stats and stores each Verdict; the simulator
// feeds it windows from virtual time, so the same rules act in both.
//
// The rules (DESIGN.md section 8): a failing check with data behind it rolls
// back at once, bake time or not, so a bad canary leaves within one
// evaluation; a check without data (too few requests, no incumbent traffic,
// a NaN, no drift samples) holds, because missing data never advances; all
// checks passing advances only once the step has baked.
package judge
