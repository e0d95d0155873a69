package chargeback

import (
	"math"
	"testing"
)

// TestSplitAddsUpExactly: whatever the shares, a row's parts add up to it
// in every integer sum, even where cost × requests passes 64 bits, and each
// consumer's part is its share rounded down.
func TestSplitAddsUpExactly(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		row  Row
		uses map[caller]callerUse
		want map[string]int64 // cost numerator by caller team
	}{
		{"requests, owner keeps the remainders", Row{Key: Key{Team: "risk"}, CostX3600: 1000, GPUSeconds: 10, Requests: 7},
			map[caller]callerUse{{}: {requests: 1}, {team: "search"}: {requests: 1}, {team: "ads"}: {requests: 1}},
			map[string]int64{"ads": 333, "search": 333, "risk": 334}},
		{"tokens outweigh requests when any were counted", Row{Key: Key{Team: "risk"}, CostX3600: 900},
			map[caller]callerUse{{}: {requests: 1, tokens: 2}, {team: "search"}: {requests: 100, tokens: 1}},
			map[string]int64{"search": 300, "risk": 600}},
		{"no calls: the owners keep it whole", Row{Key: Key{Team: "risk"}, CostX3600: 5}, nil, map[string]int64{"risk": 5}},
		{"idle GPU time has no owner to split", Row{CostX3600: 5}, map[caller]callerUse{{team: "search"}: {requests: 3}}, map[string]int64{"": 5}},
		{"beyond 64 bits", Row{Key: Key{Team: "risk"}, CostX3600: math.MaxInt64 / 3, GPUSeconds: 1 << 40},
			map[caller]callerUse{{}: {requests: 1 << 40}, {team: "search"}: {requests: (1 << 40) - 1}},
			nil},
		// risk's own graph and search's graph over risk's endpoint are
		// charged their steps' shares; search's direct calls are search's.
		{"graphs: each graph its steps' share, its team the caller", Row{Key: Key{Team: "risk"}, CostX3600: 1001, GPUSeconds: 10, Requests: 10},
			map[caller]callerUse{{}: {requests: 4}, {graph: "risk-flow"}: {requests: 3}, {team: "search", graph: "search-flow"}: {requests: 2}, {team: "search"}: {requests: 1}},
			map[string]int64{"risk/risk-flow": 300, "search/search-flow": 200, "search/": 100, "risk/": 401}},
	} {
		t.Run(c.name, func(t *testing.T) {
			parts := split(c.row, c.uses)
			var cost, seconds, requests int64
			got := map[string]int64{}
			for _, p := range parts {
				cost += p.CostX3600
				seconds += p.GPUSeconds
				requests += p.Requests
				got[p.CallerTeam] = p.CostX3600
				got[p.CallerTeam+"/"+p.Graph] = p.CostX3600
				if p.CostX3600 < 0 || p.GPUSeconds < 0 {
					t.Errorf("negative part %+v", p)
				}
			}
			if cost != c.row.CostX3600 || seconds != c.row.GPUSeconds || requests != c.row.Requests {
				t.Errorf("parts add up to cost %d, seconds %d, requests %d; want %d, %d, %d",
					cost, seconds, requests, c.row.CostX3600, c.row.GPUSeconds, c.row.Requests)
			}
			for team, n := range c.want {
				if got[team] != n {
					t.Errorf("%s's part %d, want %d (all %v)", team, got[team], n, got)
				}
			}
		})
	}
}
