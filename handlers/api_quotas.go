package handlers

import (
	"context"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"modelplane/quota"
)

type quotaSetInput struct {
	Body struct {
		Team     string  `json:"team" minLength:"1" doc:"The team whose replicas the quota caps."`
		Resource string  `json:"resource" minLength:"1" maxLength:"63" doc:"A GPU type (A100-80GB), cpu or memory."`
		Amount   float64 `json:"amount" minimum:"0" doc:"GPU equivalents of that type (a MIG slice counts as its share of the GPU's seven compute slices: 1g.10gb is 1/7), whole CPU cores, or whole MiB of memory."`
	}
}

type quotaPath struct {
	Team     string `path:"team"`
	Resource string `path:"resource"`
}

type tierGrantPath struct {
	Team string `path:"team" doc:"The team granted the tier."`
	Tier string `path:"tier" enum:"critical" doc:"The tier; only critical is granted."`
}

type quotaListBody struct {
	Items []quota.Quota `json:"items"`
}

func (s *Server) registerQuotas(api huma.API) {
	huma.Register(api, s.op("quota-list", http.MethodGet, "/quotas",
		"The GPU and CPU quotas of the teams you may see (every team for platform roles)", "fleet"),
		func(ctx context.Context, _ *struct{}) (*One[quotaListBody], error) {
			qs, err := s.Quotas.List(ctx, principal(ctx))
			if err != nil {
				return nil, s.apiError(ctx, err)
			}
			return &One[quotaListBody]{Body: quotaListBody{Items: qs}}, nil
		})
	huma.Register(api, s.op("quota-set", http.MethodPost, "/quotas",
		"Set a team's quota of a GPU type or of CPU cores; platform admins. Refused below what the team's minimum replicas hold, naming their endpoints.", "fleet"),
		func(ctx context.Context, in *quotaSetInput) (*One[quota.Quota], error) {
			q, err := s.Quotas.Set(ctx, principal(ctx), in.Body.Team, in.Body.Resource, in.Body.Amount)
			if err != nil {
				return nil, s.apiError(ctx, err)
			}
			return &One[quota.Quota]{Body: q}, nil
		})
	huma.Register(api, s.op("quota-delete", http.MethodDelete, "/quotas/{team}/{resource}",
		"Remove a team's quota of a resource (no cap); platform admins", "fleet"),
		func(ctx context.Context, in *quotaPath) (*struct{}, error) {
			if err := s.Quotas.Delete(ctx, principal(ctx), in.Team, in.Resource); err != nil {
				return nil, s.apiError(ctx, err)
			}
			return nil, nil
		})
	huma.Register(api, s.op("tier-grant", http.MethodPut, "/tier-grants/{team}/{tier}",
		"Grant a team the critical tier: its critical endpoints are placed as critical (first, preempting lower tiers); platform admins", "fleet"),
		func(ctx context.Context, in *tierGrantPath) (*struct{}, error) {
			if err := s.Quotas.GrantTier(ctx, principal(ctx), in.Team, in.Tier); err != nil {
				return nil, s.apiError(ctx, err)
			}
			return nil, nil
		})
	huma.Register(api, s.op("tier-revoke", http.MethodDelete, "/tier-grants/{team}/{tier}",
		"Take the critical tier back: the team's critical endpoints are placed as standard; platform admins", "fleet"),
		func(ctx context.Context, in *tierGrantPath) (*struct{}, error) {
			if err := s.Quotas.RevokeTier(ctx, principal(ctx), in.Team, in.Tier); err != nil {
				return nil, s.apiError(ctx, err)
			}
			return nil, nil
		})
}
