package handlers

import (
	"context"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"modelplane/drift"
)

type driftInput struct {
	Endpoint  string `path:"endpoint"`
	Version   string `query:"version" maxLength:"128" doc:"Version whose current window is judged; default the stable version (largest weight)."`
	Reference string `query:"reference" maxLength:"200" doc:"Reference window: a length before the current window (7d, 12h), or a pinned period FROM/TO in RFC 3339, optionally prefixed VERSION@; default the stable version over the 7 days before the current window."`
	Current   string `query:"current" maxLength:"200" doc:"Current window: a length ending now (1h, 90m, 2d) or a pinned period FROM/TO in RFC 3339; default 1h."`
}

// DriftBody is a drift report. Without a sample store the answer is still
// 200, with Available false and no report.
type DriftBody struct {
	Available bool `json:"available"`
	*drift.Report
}

func (s *Server) registerDrift(api huma.API) {
	huma.Register(api, s.op("endpoint-drift", http.MethodGet, "/endpoints/{endpoint}/drift",
		"Prediction drift of a version: PSI per input feature, KL of classes or normalised Wasserstein-1 of outputs, with sample counts and a verdict", "endpoints"),
		func(ctx context.Context, in *driftInput) (*One[DriftBody], error) {
			if s.Drift == nil {
				// Scope first, so that another team's endpoint is still a 404.
				if _, err := s.Endpoints.Get(ctx, principal(ctx), in.Endpoint); err != nil {
					return nil, s.apiError(ctx, err)
				}
				return &One[DriftBody]{Body: DriftBody{}}, nil
			}
			rep, err := s.Drift.Report(ctx, principal(ctx), in.Endpoint, drift.Query{Version: in.Version, Reference: in.Reference, Current: in.Current})
			if err != nil {
				return nil, s.apiError(ctx, err)
			}
			return &One[DriftBody]{Body: DriftBody{Available: true, Report: &rep}}, nil
		})
}
