package handlers

import (
	"context"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"modelplane/grant"
)

type grantPath struct {
	Endpoint string `path:"endpoint"`
	Team     string `path:"team" doc:"The consumer team."`
}

type grantSetInput struct {
	Endpoint string `path:"endpoint"`
	Team     string `path:"team" doc:"The consumer team: its API keys and members may call the endpoint through the gateway."`
	Body     struct {
		RateLimitRPS   float64 `json:"rate_limit_rps,omitempty" minimum:"0" maximum:"1000000" doc:"The team's requests per second at each gateway; 0 (the default) is unlimited. Beyond it the team gets 429."`
		RateLimitBurst int32   `json:"rate_limit_burst,omitempty" minimum:"0" maximum:"1000000" doc:"Burst of the team's rate limit; 0 is the rate rounded up."`
		DailyQuota     int64   `json:"daily_quota,omitempty" minimum:"0" maximum:"1000000000000" doc:"The team's requests per UTC day across all gateways, held within 5% (docs/sharing.md); 0 (the default) is unlimited. Beyond it the team gets 429 until midnight UTC."`
		Sampling       bool    `json:"sampling,omitempty" doc:"Whether the team's requests may be sampled into prediction samples at the endpoint's sampling rate; default false."`
	}
}

func (s *Server) registerGrants(api huma.API) {
	huma.Register(api, s.op("endpoint-grants-list", http.MethodGet, "/endpoints/{endpoint}/grants",
		"List the teams an endpoint is shared with", "sharing"),
		func(ctx context.Context, in *endpointPath) (*List[grant.Grant], error) {
			gs, err := s.Grants.List(ctx, principal(ctx), in.Endpoint)
			if err != nil {
				return nil, s.apiError(ctx, err)
			}
			out := &List[grant.Grant]{}
			out.Body.Items = gs
			return out, nil
		})
	huma.Register(api, s.op("endpoint-grant-set", http.MethodPut, "/endpoints/{endpoint}/grants/{team}",
		"Share an endpoint with a team, or change its limits", "sharing"),
		func(ctx context.Context, in *grantSetInput) (*One[grant.Grant], error) {
			b := in.Body
			g, err := s.Grants.Set(ctx, principal(ctx), in.Endpoint, in.Team, grant.Limits{RateLimitRPS: b.RateLimitRPS,
				RateLimitBurst: b.RateLimitBurst, DailyQuota: b.DailyQuota, Sampling: b.Sampling})
			if err != nil {
				return nil, s.apiError(ctx, err)
			}
			return &One[grant.Grant]{Body: g}, nil
		})
	huma.Register(api, s.op("endpoint-grant-revoke", http.MethodDelete, "/endpoints/{endpoint}/grants/{team}",
		"Stop sharing an endpoint with a team; the answer names the team's inference graphs this breaks", "sharing"),
		func(ctx context.Context, in *grantPath) (*One[grant.Revocation], error) {
			r, err := s.Grants.Revoke(ctx, principal(ctx), in.Endpoint, in.Team)
			if err != nil {
				return nil, s.apiError(ctx, err)
			}
			return &One[grant.Revocation]{Body: r}, nil
		})
	huma.Register(api, s.op("shared-list", http.MethodGet, "/shared",
		"List the endpoints other teams shared with your teams, with their schemas", "sharing"),
		func(ctx context.Context, _ *struct{}) (*List[grant.Shared], error) {
			sh, err := s.Grants.SharedWith(ctx, principal(ctx))
			if err != nil {
				return nil, s.apiError(ctx, err)
			}
			out := &List[grant.Shared]{}
			out.Body.Items = sh
			return out, nil
		})
}
