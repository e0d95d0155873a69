// Package runtime is the built-in serving runtime's server (DESIGN §16): it
// reads a replica's model directory (model.ConfigFile beside the model
// files), loads the model through the opener registered for its format,
// turns JSON instances into feature rows and output rows into answers,
// batches requests dynamically (package batch), warms up with the
// version's sample inputs before it reports ready, and speaks the KServe
// V2 / Open Inference protocol, the platform's /predict shape and Triton's
// metric names.
//
// It does not read model files itself (the loaders in runtime/xgboost,
// runtime/lightgbm and runtime/onnx do, behind model.Model), and it never
// imports the database or the agent: the agent starts it as a child process
// and talks to it over HTTP only.
//
// # What it serves
//
// POST /predict is the shape the gateway sends to every replica and the
// simulated replicas answer:
//
//	{"instances": [{"amount": 250, "country": "de"}, [5, "us"]]}
//	→ 200 {"predictions": [{"label": "fraud", "score": 0.98}, ...], "model_version": "v23"}
//
// An instance is an object keyed by feature name (other keys are ignored)
// or an array of the feature values in Features order; a numeric feature
// takes a JSON number, a categorical one a string among its categories. A
// binary classifier answers label and score (the positive class's
// probability; label is Classes[1] when score >= Threshold, default
// 0.5, else Classes[0]; classes default to "negative", "positive"), with
// probabilities too when the model gives two values; a multiclass one
// answers the argmax label, its probability as score and probabilities by
// class; a regressor answers value (values for several outputs). Errors
// are application/problem+json {"title", "status", "detail"}: 400 with the
// field in detail ("instances[0].amount: must be a number"), 413 for a body
// over the limit, 503 with Retry-After before ready, while draining and
// for a request past the queue timeout (never executed), 500 when the
// model fails. Every inference answer carries X-Model-Version.
//
// POST /v2/models/{model}/infer takes either one numeric input of shape
// [N, W], the model's W columns as it reads them, or one input per
// feature of shape [N] or [N, 1] (BYTES for categorical ones), and
// answers "output" FP32 [N, K] and, for a classifier, "label" BYTES [N];
// its errors are {"error": "..."} (see v2.go). GET /v2/health/live is 200
// from the start; /v2/health/ready and /v2/models/{model}/ready are 200
// once warmed up and not draining; GET /v2/models/{model} is the model's
// metadata and /v2 the server's. GET /v2/stats is the simulated
// replica's statistics shape (replica_id, queue_depth, in_flight,
// batch_size, latencies, counts), so the agent observes this runtime
// unchanged, and GET /metrics has Triton's nv_inference_* series labelled
// model and version.
package runtime
