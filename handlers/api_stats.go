package handlers

import (
	"context"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"modelplane/reqstats"
)

type statsInput struct {
	Endpoint string `path:"endpoint"`
	Minutes  int    `query:"minutes" minimum:"1" maximum:"360" default:"30" doc:"Window length; steps are 10 s up to 10 minutes, 1 min beyond."`
}

// StatsBody is an endpoint's request statistics over a window, one series
// per version with traffic. Without a statistics store the answer is still
// 200, with Available false and no series, like the portal section.
type StatsBody struct {
	Available   bool              `json:"available"`
	From        time.Time         `json:"from"`
	StepSeconds float64           `json:"step_seconds"`
	Versions    []reqstats.Series `json:"versions"`
}

func (s *Server) registerStats(api huma.API) {
	huma.Register(api, s.op("endpoint-stats", http.MethodGet, "/endpoints/{endpoint}/stats",
		"Request statistics per version: QPS, error rate, latency, TTFT and TPOT quantiles", "endpoints"),
		func(ctx context.Context, in *statsInput) (*One[StatsBody], error) {
			e, err := s.Endpoints.Get(ctx, principal(ctx), in.Endpoint)
			if err != nil {
				return nil, s.apiError(ctx, err)
			}
			if s.Traffic == nil {
				return &One[StatsBody]{Body: StatsBody{Versions: []reqstats.Series{}}}, nil
			}
			w, err := s.Traffic.Last(ctx, e.Name, e.ID, in.Minutes)
			if err != nil {
				return nil, s.apiError(ctx, err)
			}
			if w.Versions == nil {
				w.Versions = []reqstats.Series{}
			}
			return &One[StatsBody]{Body: StatsBody{Available: true, From: w.From, StepSeconds: w.Step.Seconds(), Versions: w.Versions}}, nil
		})
}
