package chargeback

import (
	"context"
	"time"

	"modelplane/auth"
)

// VersionCost is what one version of an endpoint cost over a canary's
// time: its metered allocation-seconds (CPU core-seconds apart) priced at
// the rate stamped on each second, and that cost per hour of the window.
type VersionCost struct {
	Version        string
	GPUSeconds     int64
	CPUCoreSeconds int64
	CostMicroUSD   int64
	// PerHourMicroUSD is the cost per hour of the window, as the version's
	// replicas ran in it.
	PerHourMicroUSD int64
}

// Canary is what a rollout's candidate has cost since the rollout started,
// the incumbent beside it over the same time, and the monthly cost change
// of promoting the candidate: both run the endpoint's replicas during a
// canary, each on its own allocations (a CPU version on cores, a GPU
// version on its GPUs or slices), so the change is the difference of their
// hourly costs over the same window times the hours of a month.
type Canary struct {
	From, To             time.Time
	Candidate, Incumbent VersionCost
	// MonthlyChangeMicroUSD is positive when promoting costs more.
	MonthlyChangeMicroUSD int64
}

// Canary prices the candidate and incumbent versions of endpoint from
// from (the rollout's start, at most MaxPeriod ago) to to (its end, or
// now when zero), for p (scoped as Report is).
func (s *Service) Canary(ctx context.Context, p *auth.Principal, endpoint, candidate, incumbent string, from, to time.Time) (Canary, error) {
	if to.IsZero() {
		to = s.clock.Now()
	}
	if earliest := to.Add(-MaxPeriod); from.Before(earliest) {
		from = earliest
	}
	from = from.UTC().Truncate(time.Second)
	c := Canary{From: from, To: to.UTC().Truncate(time.Second), Candidate: VersionCost{Version: candidate}, Incumbent: VersionCost{Version: incumbent}}
	if !c.To.After(c.From) {
		return c, nil
	}
	rep, err := s.Report(ctx, p, Query{From: c.From, To: c.To, GroupBy: []Dimension{DimVersion}, Endpoint: endpoint})
	if err != nil {
		return Canary{}, err
	}
	secs := int64(c.To.Sub(c.From) / time.Second)
	for _, r := range rep.Rows {
		var v *VersionCost
		switch r.Version {
		case candidate:
			v = &c.Candidate
		case incumbent:
			v = &c.Incumbent
		default:
			continue
		}
		// CostX3600 sums µUSD-per-hour rates over allocation-seconds:
		// divided by the window's seconds it is µUSD per hour.
		v.GPUSeconds, v.CPUCoreSeconds, v.CostMicroUSD = r.GPUSeconds, r.CPUCoreSeconds, r.CostMicroUSD
		v.PerHourMicroUSD = (r.CostX3600 + secs/2) / secs
	}
	c.MonthlyChangeMicroUSD = int64(float64(c.Candidate.PerHourMicroUSD-c.Incumbent.PerHourMicroUSD) * hoursPerMonth)
	return c, nil
}
