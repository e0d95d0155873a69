package handlers

import (
	"context"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"modelplane/autoscale"
	"modelplane/endpoint"
	"modelplane/fleet"
)

type autoscalingInput struct {
	Endpoint string `path:"endpoint"`
	Body     autoscale.PolicyDoc
}

type decisionsInput struct {
	Endpoint string `path:"endpoint"`
	Page
}

func (s *Server) registerAutoscaling(api huma.API) {
	huma.Register(api, s.op("endpoint-autoscaling-get", http.MethodGet, "/endpoints/{endpoint}/autoscaling",
		"Get an endpoint's autoscaling policy and replica count", "endpoints"),
		func(ctx context.Context, in *endpointPath) (*One[endpoint.Autoscaling], error) {
			a, err := s.Endpoints.Autoscaling(ctx, principal(ctx), in.Endpoint, s.wakeGrace())
			if err != nil {
				return nil, s.apiError(ctx, err)
			}
			return &One[endpoint.Autoscaling]{Body: a}, nil
		})
	huma.Register(api, s.op("endpoint-autoscaling-set", http.MethodPut, "/endpoints/{endpoint}/autoscaling",
		"Set an endpoint's autoscaling policy (its min_replicas and max_replicas included)", "endpoints"),
		func(ctx context.Context, in *autoscalingInput) (*One[endpoint.Autoscaling], error) {
			a, err := s.Endpoints.SetAutoscaling(ctx, principal(ctx), in.Endpoint, in.Body, s.wakeGrace())
			if err != nil {
				return nil, s.apiError(ctx, err)
			}
			return &One[endpoint.Autoscaling]{Body: a}, nil
		})
	huma.Register(api, s.op("endpoint-autoscaling-decisions", http.MethodGet, "/endpoints/{endpoint}/autoscaling/decisions",
		"List the endpoint's autoscaling decisions that changed its replica count, newest first", "endpoints"),
		func(ctx context.Context, in *decisionsInput) (*List[endpoint.ScalingDecision], error) {
			before, err := in.after()
			if err != nil {
				return nil, err
			}
			ds, err := s.Endpoints.AutoscaleDecisions(ctx, principal(ctx), in.Endpoint, before, in.Limit+1)
			if err != nil {
				return nil, s.apiError(ctx, err)
			}
			return page(ds, in.Limit, func(d endpoint.ScalingDecision) int64 { return d.ID }), nil
		})
}

// wakeGrace is the fleet's wake grace, the default scale-to-zero grace of
// an autoscaling policy.
func (s *Server) wakeGrace() time.Duration {
	if s.Fleet == nil {
		return fleet.DefaultWakeGrace
	}
	return s.Fleet.Grace()
}
