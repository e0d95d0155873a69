package route_test

import (
	"testing"

	"modelplane/route"
)

func TestBudgetBlocksFor(t *testing.T) {
	t.Parallel()
	ep := int64(7)
	blocks := route.BudgetBlocks{
		{TeamID: 1, TeamName: "risk", EndpointID: &ep, EndpointName: "fraud-ep", MonthlyUusd: 10_000_000, SpentUusd: 10_250_000},
		{TeamID: 2, TeamName: "search", MonthlyUusd: 5_000_000, SpentUusd: 5_000_000},
	}
	for _, c := range []struct {
		name               string
		teamID, endpointID int64
		want               string
	}{
		{"an endpoint's own budget blocks it", 1, 7, "budget exceeded: endpoint fraud-ep spent $10.25 of its $10.00 monthly budget (enforcement block)"},
		{"an endpoint budget blocks no other endpoint of its team", 1, 8, ""},
		{"a team budget blocks every endpoint of the team", 2, 9, "budget exceeded: team search spent $5.00 of its $5.00 monthly budget (enforcement block)"},
		{"no budget of another team blocks", 3, 7, ""},
	} {
		if got := blocks.For(c.teamID, c.endpointID); got != c.want {
			t.Errorf("%s: For(%d, %d) = %q, want %q", c.name, c.teamID, c.endpointID, got, c.want)
		}
	}
	var none route.BudgetBlocks
	if got := none.For(1, 7); got != "" {
		t.Errorf("no blocking budget: For = %q, want none", got)
	}
}
