package drift

import (
	"context"
	"time"

	"modelplane/judge"
)

// Gate is the rollout judge's view of a Reader: it implements
// rollout.DriftMeasurer (package rollout depends on judge, not on drift, so
// the two stay apart and the app wires them together).
type Gate struct {
	r *Reader
}

// NewGate returns the drift measurer of the rollout controller over r.
func NewGate(r *Reader) *Gate { return &Gate{r: r} }

// Drift compares candidate's outputs with incumbent's over [from, to) with
// Compare and returns the numbers the judge holds to the threshold. With
// too few samples on either side Enough is false and the judge holds: a
// drift gate never rolls back on missing data.
func (g *Gate) Drift(ctx context.Context, endpoint string, endpointID int64, candidate, incumbent string, from, to time.Time) (*judge.Drift, error) {
	d, err := g.r.Compare(ctx, endpoint, endpointID, candidate, incumbent, from, to)
	if err != nil {
		return nil, err
	}
	return JudgeDrift(d), nil
}

// JudgeDrift is d as the judge records it: the candidate is the current
// window, the incumbent the reference.
func JudgeDrift(d OutputDrift) *judge.Drift {
	return &judge.Drift{Metric: d.Metric, Value: d.Value, Threshold: d.Threshold, Enough: d.Enough,
		CandidateSamples: d.CurrentSamples, IncumbentSamples: d.ReferenceSamples}
}
