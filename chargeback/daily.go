package chargeback

import (
	"context"
	"sort"
	"time"

	"modelplane/auth"
)

// Daily is cost per UTC day of a period, split by one dimension: the
// stacked daily chart of the portal.
type Daily struct {
	// Days are the period's days, "2026-10-01" on, in order, with or
	// without usage.
	Days []string
	// Series are the dimension's values, most costly first, each with one
	// cost per day in micro-USD × 3600 (exact; a chart needs no rounding).
	Series []DailySeries
}

// DailySeries is one value of the split dimension across the days.
type DailySeries struct {
	Label     string
	CostX3600 []int64
	total     int64
}

// Daily reads q's period per UTC day, split by the dimension by (the query's
// GroupBy is ignored), scoped like Report.
func (s *Service) Daily(ctx context.Context, p *auth.Principal, q Query, by Dimension) (*Daily, error) {
	if err := q.check(); err != nil {
		return nil, err
	}
	out := &Daily{}
	for d := q.From.Truncate(24 * time.Hour); d.Before(q.To); d = d.Add(24 * time.Hour) {
		out.Days = append(out.Days, d.Format(time.DateOnly))
	}
	all, teams := scope(p)
	if !all && len(teams) == 0 {
		return out, nil
	}
	rows, err := s.usage(ctx, []Dimension{dimDay, by}, filter{all: all, teams: teams, team: q.Team, endpoint: q.Endpoint}, q.From, q.To, q.Source)
	if err != nil {
		return nil, err
	}
	index := map[string]int{}
	for i, d := range out.Days {
		index[d] = i
	}
	series := map[string]*DailySeries{}
	for _, r := range rows {
		label := r.Get(by)
		ser := series[label]
		if ser == nil {
			ser = &DailySeries{Label: label, CostX3600: make([]int64, len(out.Days))}
			series[label] = ser
		}
		if i, ok := index[r.day]; ok {
			ser.CostX3600[i] += r.CostX3600
			ser.total += r.CostX3600
		}
	}
	for _, ser := range series {
		out.Series = append(out.Series, *ser)
	}
	sort.Slice(out.Series, func(i, j int) bool {
		if out.Series[i].total != out.Series[j].total {
			return out.Series[i].total > out.Series[j].total
		}
		return out.Series[i].Label < out.Series[j].Label
	})
	return out, nil
}
