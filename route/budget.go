package route

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"modelplane/db"
	"modelplane/money"
)

// BudgetBlocks are the budgets with block enforcement that reached 100
// percent in one month. The routing entry of a scale-to-zero endpoint they
// cover says so (proto.Route.Blocked), and the fleet reconciler starts no
// replica beyond the endpoint's minimum: both ask For, so the two always
// agree.
type BudgetBlocks []db.BudgetBlockingListRow

// BudgetBlocksAt returns the blocking budgets of the month of now.
func BudgetBlocksAt(ctx context.Context, q *db.Queries, now time.Time) (BudgetBlocks, error) {
	month := time.Date(now.UTC().Year(), now.UTC().Month(), 1, 0, 0, 0, 0, time.UTC)
	rows, err := q.BudgetBlockingList(ctx, pgtype.Date{Time: month, Valid: true})
	if err != nil {
		return nil, fmt.Errorf("blocking budgets: %w", err)
	}
	return rows, nil
}

// For says which blocking budget covers an endpoint (its team's or its
// own), or "" when none does.
func (b BudgetBlocks) For(teamID, endpointID int64) string {
	for _, x := range b {
		if x.TeamID != teamID || (x.EndpointID != nil && *x.EndpointID != endpointID) {
			continue
		}
		who := "team " + x.TeamName
		if x.EndpointID != nil {
			who = "endpoint " + x.EndpointName
		}
		return fmt.Sprintf("budget exceeded: %s spent $%s of its $%s monthly budget (enforcement block)",
			who, money.Dollars(x.SpentUusd), money.Dollars(x.MonthlyUusd))
	}
	return ""
}
