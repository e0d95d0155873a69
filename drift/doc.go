// Package drift measures how far a model version's inputs and outputs have
// moved from a reference, from the prediction samples the gateways publish
// (ClickHouse prediction_samples, written by package ingest).
//
// The math is pure and lives in package drift/stat, which the simulator
// shares: PSI per input feature over ten bins cut at the reference's
// deciles, KL divergence of predicted class distributions, and
// Wasserstein-1 of outputs (and of LLM completion lengths) divided by the
// reference's standard deviation. Empty bins and unseen classes count as
// stat.Epsilon.
//
// Reader computes the same numbers from ClickHouse without pulling samples
// out: the reference's quantiles, the per-bin counts of both windows, the
// output quantile grids and the class counts are all aggregates computed in
// ClickHouse; Go only combines a few hundred numbers. Reader.Report is the
// drift report of one version against a reference window; Reader.Compare
// is what the rollout judge calls to compare a candidate's outputs with the
// incumbent's over the same window:
//
//	d, err := reader.Compare(ctx, "fraud", endpointID, "v24", "v23", from, to)
//	// d.Metric is "kl" (classification with labels), "w1_norm"
//	// (scores, regression) or "completion_length_w1_norm" (LLM);
//	// d.Value, d.Threshold, d.Drifting, d.Enough, d.ReferenceSamples and
//	// d.CurrentSamples are what the judge records. Drifting is never true
//	// when Enough is false.
//
// The Reader reads by endpoint name only and knows nothing of teams:
// callers scope first (handlers load the endpoint through the team-scoped
// endpoint.Service). Service adds the PostgreSQL side: the default
// reference (the stable version, the largest weight in routing_rules),
// stored scores, and Checker, the scheduled reconciler that records scores,
// exports ml_serving_prediction_drift_score and raises alerts. Retention
// removes expired samples. See docs/drift.md.
package drift
