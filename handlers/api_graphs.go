package handlers

import (
	"context"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"modelplane/endpoint"
	"modelplane/graph"
)

type graphCreateInput struct {
	Body struct {
		Name           string           `json:"name" doc:"Globally unique among endpoints and models, DNS-label-like; the graph is called at /v1/endpoints/{name}/predict."`
		Team           string           `json:"team,omitempty" doc:"Owning team; may be left out by a caller of one team."`
		Description    string           `json:"description,omitempty" maxLength:"2000"`
		Version        string           `json:"version,omitempty" doc:"Name of the first version, served at 100 percent; default v1."`
		Graph          graph.Definition `json:"graph" doc:"The definition: nodes (call, sequence, switch, ensemble, splitter, router) referring to each other by id, and the entry node (docs/graphs.md)."`
		Tier           string           `json:"tier,omitempty" enum:"critical,standard,batch" default:"standard"`
		SamplingRate   float64          `json:"sampling_rate,omitempty" minimum:"0" maximum:"1"`
		RetentionDays  int32            `json:"retention_days,omitempty" minimum:"1" maximum:"3650" default:"30"`
		RateLimitRPS   float64          `json:"rate_limit_rps,omitempty" minimum:"0" maximum:"1000000" doc:"Requests per second across callers, at each gateway; 0 uses the gateway's default."`
		RateLimitBurst int32            `json:"rate_limit_burst,omitempty" minimum:"0" maximum:"1000000"`
		TimeoutMS      int32            `json:"timeout_ms,omitempty" minimum:"0" maximum:"3600000" doc:"Bound on the whole graph, in milliseconds; 0 uses the gateway's default. Each call node may bound its own call (timeout_ms)."`
	}
}

type graphVersionInput struct {
	Endpoint string `path:"endpoint"`
	Body     struct {
		Version string           `json:"version" doc:"Name of the new version; it takes no traffic until a rollout (POST /endpoints/{endpoint}/rollouts) moves it in."`
		Graph   graph.Definition `json:"graph"`
	}
}

func (s *Server) registerGraphs(api huma.API) {
	huma.Register(api, s.op("graphs-create", http.MethodPost, "/graphs",
		"Create a graph endpoint: a versioned graph of calls to endpoints, run by the gateway", "graphs"),
		func(ctx context.Context, in *graphCreateInput) (*One[endpoint.Endpoint], error) {
			b := in.Body
			e, err := s.Endpoints.CreateGraph(ctx, principal(ctx), endpoint.GraphSpec{Name: b.Name, Team: b.Team, Description: b.Description,
				Version: b.Version, Definition: b.Graph, Settings: endpoint.Settings{Tier: b.Tier, SamplingRate: b.SamplingRate,
					RetentionDays: b.RetentionDays, RateLimitRPS: b.RateLimitRPS, RateLimitBurst: b.RateLimitBurst, TimeoutMS: b.TimeoutMS}})
			if err != nil {
				return nil, s.apiError(ctx, err)
			}
			return &One[endpoint.Endpoint]{Body: e}, nil
		})
	huma.Register(api, s.op("graph-versions-list", http.MethodGet, "/endpoints/{endpoint}/graph/versions",
		"List a graph endpoint's versions with their definitions", "graphs"),
		func(ctx context.Context, in *endpointPath) (*List[endpoint.GraphVersion], error) {
			vs, err := s.Endpoints.GraphVersions(ctx, principal(ctx), in.Endpoint)
			if err != nil {
				return nil, s.apiError(ctx, err)
			}
			out := &List[endpoint.GraphVersion]{}
			out.Body.Items = vs
			return out, nil
		})
	huma.Register(api, s.op("graph-version-create", http.MethodPost, "/endpoints/{endpoint}/graph/versions",
		"Save a new version of a graph endpoint, validated; a rollout moves traffic to it", "graphs"),
		func(ctx context.Context, in *graphVersionInput) (*One[endpoint.GraphVersion], error) {
			v, err := s.Endpoints.AddGraphVersion(ctx, principal(ctx), in.Endpoint, in.Body.Version, in.Body.Graph)
			if err != nil {
				return nil, s.apiError(ctx, err)
			}
			return &One[endpoint.GraphVersion]{Body: v}, nil
		})
}
