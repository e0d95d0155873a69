package handlers

import (
	"context"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"modelplane/chargeback"
)

type budgetSetInput struct {
	Body struct {
		Team        string `json:"team" minLength:"1" doc:"The team whose spend the budget bounds."`
		Endpoint    string `json:"endpoint,omitempty" doc:"One endpoint of the team; absent for the whole team."`
		MonthlyUUSD int64  `json:"monthly_uusd" minimum:"1" doc:"The monthly budget in micro-USD."`
		Enforcement string `json:"enforcement,omitempty" enum:"alert,block" doc:"alert (default): events at 80 and 100 percent; block: also no replicas beyond the minimum once spent."`
	}
}

type budgetListBody struct {
	Items  []chargeback.Budget `json:"items"`
	Alerts []chargeback.Alert  `json:"alerts" doc:"This month's alerts, newest first."`
}

func (s *Server) registerBudgets(api huma.API) {
	huma.Register(api, s.op("budget-list", http.MethodGet, "/budgets",
		"Budgets you may see with this month's spend and month-end forecast, and this month's alerts", "chargeback"),
		func(ctx context.Context, _ *struct{}) (*One[budgetListBody], error) {
			if s.Budgets == nil {
				return nil, errNoChargeback
			}
			items, err := s.Budgets.List(ctx, principal(ctx))
			if err != nil {
				return nil, s.apiError(ctx, err)
			}
			alerts, err := s.Budgets.Alerts(ctx, principal(ctx))
			if err != nil {
				return nil, s.apiError(ctx, err)
			}
			return &One[budgetListBody]{Body: budgetListBody{Items: items, Alerts: alerts}}, nil
		})
	huma.Register(api, s.op("budget-set", http.MethodPost, "/budgets",
		"Set (create or replace) the monthly budget of a team or one of its endpoints; team admins", "chargeback"),
		func(ctx context.Context, in *budgetSetInput) (*One[chargeback.Budget], error) {
			if s.Budgets == nil {
				return nil, errNoChargeback
			}
			b, err := s.Budgets.Set(ctx, principal(ctx), chargeback.BudgetSpec{Team: in.Body.Team, Endpoint: in.Body.Endpoint,
				MonthlyUUSD: in.Body.MonthlyUUSD, Enforcement: in.Body.Enforcement})
			if err != nil {
				return nil, s.apiError(ctx, err)
			}
			return &One[chargeback.Budget]{Body: b}, nil
		})
}
