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

type explorerInput struct {
	Endpoint string `path:"endpoint"`
	Minutes  int    `query:"minutes" minimum:"1" maximum:"360" default:"60" doc:"Window length in minutes."`
}

// ExplorerBody is an endpoint's request explorer over a window: the
// slowest, failed and sampled requests the gateways named, and their
// overhead. Without a statistics store the answer is still 200, with
// Available false and empty lists.
type ExplorerBody struct {
	Available bool `json:"available"`
	reqstats.Explorer
}

func (s *Server) registerExplorer(api huma.API) {
	huma.Register(api, s.op("endpoint-requests", http.MethodGet, "/endpoints/{endpoint}/requests",
		"Notable requests: the slowest, failed and sampled ones with trace id, version, replica, status and the split of their latency between gateway and replica; the gateway overhead's p50 and p99", "endpoints"),
		func(ctx context.Context, in *explorerInput) (*One[ExplorerBody], error) {
			e, err := s.Endpoints.Get(ctx, principal(ctx), in.Endpoint)
			if err != nil {
				return nil, s.apiError(ctx, err)
			}
			if s.Traffic == nil {
				empty := []reqstats.Request{}
				return &One[ExplorerBody]{Body: ExplorerBody{Explorer: reqstats.Explorer{Slowest: empty, Failed: empty, Sampled: empty,
					Overhead: []reqstats.Overhead{}}}}, nil
			}
			x, err := s.Traffic.Explore(ctx, e.Name, e.ID, in.Minutes)
			if err != nil {
				return nil, s.apiError(ctx, err)
			}
			return &One[ExplorerBody]{Body: ExplorerBody{Available: true, Explorer: x}}, nil
		})
}
