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
package runtime
