package handlers

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"modelplane/registry"
)

type modelCreateInput struct {
	Body struct {
		Team         string          `json:"team,omitempty" doc:"Owning team; may be omitted when the caller has exactly one."`
		Name         string          `json:"name" doc:"Globally unique, DNS-label-like."`
		Task         string          `json:"task" enum:"classification,regression,llm"`
		Description  string          `json:"description,omitempty"`
		InputSchema  json.RawMessage `json:"input_schema,omitempty" doc:"JSON Schema of one instance, an object keyed by feature name. At /predict an instance may also be a row: an array of the feature values in feature_names order, checked as the object it stands for."`
		OutputSchema json.RawMessage `json:"output_schema,omitempty" doc:"JSON Schema of one prediction."`
		FeatureNames []string        `json:"feature_names,omitempty" doc:"The model's features in the order it reads them, which is the order of a row instance's values at /predict."`
	}
}

type modelPath struct {
	Model string `path:"model"`
}

func (s *Server) registerModels(api huma.API) {
	huma.Register(api, s.op("models-list", http.MethodGet, "/models", "List models", "models"),
		func(ctx context.Context, in *Page) (*List[registry.Model], error) {
			after, err := in.after()
			if err != nil {
				return nil, err
			}
			ms, err := s.Registry.Models(ctx, principal(ctx), after, in.Limit+1)
			if err != nil {
				return nil, s.apiError(ctx, err)
			}
			return page(ms, in.Limit, func(m registry.Model) int64 { return m.ID }), nil
		})
	huma.Register(api, s.op("models-create", http.MethodPost, "/models", "Create a model", "models"),
		func(ctx context.Context, in *modelCreateInput) (*One[registry.Model], error) {
			b := in.Body
			m, err := s.Registry.CreateModel(ctx, principal(ctx), registry.ModelSpec{Team: b.Team, Name: b.Name, Task: b.Task,
				Description: b.Description, InputSchema: b.InputSchema, OutputSchema: b.OutputSchema, FeatureNames: b.FeatureNames})
			if err != nil {
				return nil, s.apiError(ctx, err)
			}
			return &One[registry.Model]{Body: m}, nil
		})
	huma.Register(api, s.op("model-get", http.MethodGet, "/models/{model}", "Get a model", "models"),
		func(ctx context.Context, in *modelPath) (*One[registry.Model], error) {
			m, err := s.Registry.Model(ctx, principal(ctx), in.Model)
			if err != nil {
				return nil, s.apiError(ctx, err)
			}
			return &One[registry.Model]{Body: m}, nil
		})
}
