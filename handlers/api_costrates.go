package handlers

import (
	"context"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"modelplane/billing"
)

type costRateCreateInput struct {
	Body struct {
		GPUType       string    `json:"gpu_type" minLength:"1" maxLength:"63" doc:"GPU type, e.g. A100-80GB."`
		Profile       string    `json:"profile" doc:"full, a MIG profile (mig-1g.10gb), an MPS share (mps-25pct) or cpu-core."`
		UUSDPerHour   int64     `json:"uusd_per_hour" minimum:"0" doc:"Micro-USD per hour of one allocation."`
		EffectiveFrom time.Time `json:"effective_from" doc:"When the rate takes effect; at least 5 minutes ahead, kept to the whole second."`
	}
}

type costRateListBody struct {
	Items []billing.Entry `json:"items"`
}

func (s *Server) registerCostRates(api huma.API) {
	huma.Register(api, s.op("cost-rate-list", http.MethodGet, "/cost-rates",
		"Every cost rate ever entered, by GPU type, profile and effective time (the whole history, unpaged: it is small)", "chargeback"),
		func(ctx context.Context, _ *struct{}) (*One[costRateListBody], error) {
			rows, err := s.Rates.List(ctx)
			if err != nil {
				return nil, s.apiError(ctx, err)
			}
			return &One[costRateListBody]{Body: costRateListBody{Items: rows}}, nil
		})
	huma.Register(api, s.op("cost-rate-create", http.MethodPost, "/cost-rates",
		"Enter a new cost rate; platform admins only (finance reads rates: 403). Seconds before its effective time keep their rate.", "chargeback"),
		func(ctx context.Context, in *costRateCreateInput) (*One[billing.Entry], error) {
			e, err := s.Rates.Create(ctx, principal(ctx), billing.Rate{GPUType: in.Body.GPUType, Profile: in.Body.Profile,
				UUSDPerHour: in.Body.UUSDPerHour, EffectiveFrom: in.Body.EffectiveFrom})
			if err != nil {
				return nil, s.apiError(ctx, err)
			}
			return &One[billing.Entry]{Body: e}, nil
		})
}
