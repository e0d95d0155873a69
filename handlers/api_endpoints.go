package handlers

import (
	"context"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"modelplane/endpoint"
)

// EndpointSettings are the settable fields of an endpoint.
type EndpointSettings struct {
	InstanceProfile string            `json:"instance_profile,omitempty" enum:"cpu,gpu-a100-80gb,gpu-h100-80gb,mig-1g.10gb,mig-2g.20gb,mig-3g.40gb,mig-4g.40gb,mig-7g.80gb" doc:"cpu: cores and memory on a CPU node, as the version states them; the default on create when the version needs no GPU (gpu_count 0), which is always served on a CPU node. The GPU profiles size GPU versions. Left out on update: the endpoint's own."`
	MinReplicas     *int32            `json:"min_replicas,omitempty" minimum:"0" maximum:"1000" default:"1" doc:"Replicas kept however idle; 0 lets the endpoint scale to zero."`
	MaxReplicas     *int32            `json:"max_replicas,omitempty" minimum:"1" maximum:"1000" doc:"Most replicas the autoscaler may run; default min_replicas, at least 1."`
	Tier            string            `json:"tier,omitempty" enum:"critical,standard,batch" default:"standard"`
	SamplingRate    float64           `json:"sampling_rate,omitempty" minimum:"0" maximum:"1" doc:"Share of requests whose prediction is sampled; 0 turns sampling off."`
	RetentionDays   int32             `json:"retention_days,omitempty" minimum:"1" maximum:"3650" default:"30"`
	RateLimitRPS    float64           `json:"rate_limit_rps,omitempty" minimum:"0" maximum:"1000000" doc:"Requests per second across callers, at each gateway; 0 uses the gateway's default."`
	RateLimitBurst  int32             `json:"rate_limit_burst,omitempty" minimum:"0" maximum:"1000000" doc:"Burst of the rate limit; 0 is the rate rounded up."`
	TimeoutMS       int32             `json:"timeout_ms,omitempty" minimum:"0" maximum:"3600000" doc:"Bound on one request upstream, in milliseconds; 0 uses the gateway's default."`
	Batching        *BatchingSettings `json:"batching,omitempty" doc:"The built-in runtime's dynamic batcher (xgboost, lightgbm and onnxruntime versions); a field left out takes its default. A change restarts the endpoint's replicas with the new settings."`
}

// BatchingSettings are the dynamic batcher's settings as the API takes
// them: a field left out is endpoint.DefaultBatching's. Pointers, because
// 0 is a valid max_queue_delay_us (no waiting) and must not read as unset.
type BatchingSettings struct {
	MaxBatchSize        *int32  `json:"max_batch_size,omitempty" minimum:"1" maximum:"1024" doc:"Largest batch executed, in rows (1-1024; default 32); 1 turns batching off."`
	MaxQueueDelayUS     *int32  `json:"max_queue_delay_us,omitempty" minimum:"0" maximum:"1000000" doc:"Longest a request waits for others to join its batch, in microseconds (0-1000000; default 500)."`
	PreferredBatchSizes []int32 `json:"preferred_batch_sizes,omitempty" maxItems:"16" doc:"Sizes executed as soon as a batch reaches one: ascending, each at most max_batch_size (default none)."`
	QueueTimeoutMS      *int32  `json:"queue_timeout_ms,omitempty" minimum:"1" maximum:"60000" doc:"How long a request may wait in the queue, in milliseconds (1-60000; default 1000); past it the answer is 503 with Retry-After and the request never runs."`
}

// batching fills what b leaves out from endpoint.DefaultBatching.
func (b *BatchingSettings) batching() endpoint.Batching {
	out := endpoint.DefaultBatching
	if b == nil {
		return out
	}
	if b.MaxBatchSize != nil {
		out.MaxBatchSize = *b.MaxBatchSize
	}
	if b.MaxQueueDelayUS != nil {
		out.MaxQueueDelayUS = *b.MaxQueueDelayUS
	}
	if b.PreferredBatchSizes != nil {
		out.PreferredBatchSizes = b.PreferredBatchSizes
	}
	if b.QueueTimeoutMS != nil {
		out.QueueTimeoutMS = *b.QueueTimeoutMS
	}
	return out
}

// replicas are the bounds e states, with the defaults for what it leaves
// out: one replica at least and at most.
func (e EndpointSettings) replicas() (minimum, maximum int32) {
	minimum = 1
	if e.MinReplicas != nil {
		minimum = *e.MinReplicas
	}
	maximum = max(minimum, 1)
	if e.MaxReplicas != nil {
		maximum = *e.MaxReplicas
	}
	return minimum, maximum
}

func (e EndpointSettings) settings() endpoint.Settings {
	minimum, maximum := e.replicas()
	return endpoint.Settings{InstanceProfile: e.InstanceProfile, MinReplicas: minimum, MaxReplicas: maximum,
		Tier: e.Tier, SamplingRate: e.SamplingRate, RetentionDays: e.RetentionDays,
		RateLimitRPS: e.RateLimitRPS, RateLimitBurst: e.RateLimitBurst, TimeoutMS: e.TimeoutMS,
		Batching: e.Batching.batching()}
}

type endpointCreateInput struct {
	Body struct {
		Name    string `json:"name" doc:"Globally unique, DNS-label-like; part of the inference URL."`
		Model   string `json:"model"`
		Version string `json:"version" doc:"Initial version, served at 100 percent."`
		Runtime string `json:"runtime,omitempty" deprecated:"true" doc:"Deprecated, derived: the version's runtime decides how it is served, so leave it out. Accepted for compatibility when it names the version's runtime; any other value is 400."`
		EndpointSettings
	}
}

type endpointPath struct {
	Endpoint string `path:"endpoint"`
}

type endpointUpdateInput struct {
	Endpoint string `path:"endpoint"`
	Body     EndpointSettings
}

type trafficInput struct {
	Endpoint string `path:"endpoint"`
	Body     struct {
		Weights []endpoint.Weight `json:"weights" doc:"Version weights in percent; they must sum to 100. A version of weight 0 may set shadow_percent (0-100): that share of the endpoint's requests is mirrored to it, its answers never reach the caller."`
	}
}

type experimentInput struct {
	Endpoint string `path:"endpoint"`
	Body     endpoint.Experiment
}

func (s *Server) registerEndpoints(api huma.API) {
	huma.Register(api, s.op("endpoints-list", http.MethodGet, "/endpoints", "List endpoints", "endpoints"),
		func(ctx context.Context, in *Page) (*List[endpoint.Endpoint], error) {
			after, err := in.after()
			if err != nil {
				return nil, err
			}
			es, err := s.Endpoints.List(ctx, principal(ctx), after, in.Limit+1)
			if err != nil {
				return nil, s.apiError(ctx, err)
			}
			return page(es, in.Limit, func(e endpoint.Endpoint) int64 { return e.ID }), nil
		})
	huma.Register(api, s.op("endpoints-create", http.MethodPost, "/endpoints", "Create an endpoint", "endpoints"),
		func(ctx context.Context, in *endpointCreateInput) (*One[endpoint.Endpoint], error) {
			b := in.Body
			e, err := s.Endpoints.Create(ctx, principal(ctx), endpoint.Spec{Name: b.Name, Model: b.Model, Version: b.Version,
				Runtime: b.Runtime, Settings: b.settings()})
			if err != nil {
				return nil, s.apiError(ctx, err)
			}
			return &One[endpoint.Endpoint]{Body: e}, nil
		})
	huma.Register(api, s.op("endpoint-get", http.MethodGet, "/endpoints/{endpoint}", "Get an endpoint", "endpoints"),
		func(ctx context.Context, in *endpointPath) (*One[endpoint.Endpoint], error) {
			e, err := s.Endpoints.Get(ctx, principal(ctx), in.Endpoint)
			if err != nil {
				return nil, s.apiError(ctx, err)
			}
			return &One[endpoint.Endpoint]{Body: e}, nil
		})
	huma.Register(api, s.op("endpoint-replicas-list", http.MethodGet, "/endpoints/{endpoint}/replicas",
		"List an endpoint's replicas with what each runs: its command line and generated files", "endpoints"),
		func(ctx context.Context, in *endpointPath) (*List[endpoint.Replica], error) {
			rs, err := s.Endpoints.Replicas(ctx, principal(ctx), in.Endpoint)
			if err != nil {
				return nil, s.apiError(ctx, err)
			}
			out := &List[endpoint.Replica]{}
			out.Body.Items = rs
			return out, nil
		})
	huma.Register(api, s.op("endpoint-update", http.MethodPut, "/endpoints/{endpoint}", "Update an endpoint's settings", "endpoints"),
		func(ctx context.Context, in *endpointUpdateInput) (*One[endpoint.Endpoint], error) {
			e, err := s.Endpoints.Update(ctx, principal(ctx), in.Endpoint, in.Body.settings())
			if err != nil {
				return nil, s.apiError(ctx, err)
			}
			return &One[endpoint.Endpoint]{Body: e}, nil
		})
	huma.Register(api, s.op("endpoint-delete", http.MethodDelete, "/endpoints/{endpoint}", "Delete an endpoint", "endpoints"),
		func(ctx context.Context, in *endpointPath) (*struct{}, error) {
			if err := s.Endpoints.Delete(ctx, principal(ctx), in.Endpoint); err != nil {
				return nil, s.apiError(ctx, err)
			}
			return nil, nil
		})
	huma.Register(api, s.op("endpoint-traffic-set", http.MethodPut, "/endpoints/{endpoint}/traffic", "Set the traffic split", "endpoints"),
		func(ctx context.Context, in *trafficInput) (*One[endpoint.Endpoint], error) {
			e, err := s.Endpoints.SetTraffic(ctx, principal(ctx), in.Endpoint, in.Body.Weights)
			if err != nil {
				return nil, s.apiError(ctx, err)
			}
			return &One[endpoint.Endpoint]{Body: e}, nil
		})
	huma.Register(api, s.op("endpoint-experiment-set", http.MethodPut, "/endpoints/{endpoint}/experiment", "Start or replace the A/B experiment", "endpoints"),
		func(ctx context.Context, in *experimentInput) (*One[endpoint.Endpoint], error) {
			e, err := s.Endpoints.SetExperiment(ctx, principal(ctx), in.Endpoint, in.Body)
			if err != nil {
				return nil, s.apiError(ctx, err)
			}
			return &One[endpoint.Endpoint]{Body: e}, nil
		})
	huma.Register(api, s.op("endpoint-experiment-end", http.MethodDelete, "/endpoints/{endpoint}/experiment", "End the A/B experiment", "endpoints"),
		func(ctx context.Context, in *endpointPath) (*struct{}, error) {
			if err := s.Endpoints.EndExperiment(ctx, principal(ctx), in.Endpoint); err != nil {
				return nil, s.apiError(ctx, err)
			}
			return nil, nil
		})
}
