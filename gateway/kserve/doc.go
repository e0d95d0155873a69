// Package kserve translates the gateway's /predict calls for runtimes that
// speak only the KServe V2 / Open Inference protocol (Triton): a body of
// {"instances": [...]} becomes a POST /v2/models/{model}/infer request, and
// the V2 answer becomes {"predictions": [...], "model_version": ...}, the
// shape every other replica answers in.
//
// The request is one FP32 tensor named input__0 of shape [N, F]: N
// instances of the model's F features in feature_names order. That is how
// Triton's FIL backend (XGBoost, LightGBM, scikit-learn trees) names and
// shapes a tabular model's input, the usual classic-model configuration; an
// ONNX model served by Triton must name its input input__0 (and the
// built-in runtime reads any single non-feature tensor so). A tensor per
// feature is not sent: it needs a config.pbtxt written for each model.
//
// A model that declares no feature_names is served with its own tensors
// (an ONNX graph's named inputs, as Triton's ONNX Runtime backend and the
// built-in runtime serve them): each instance is an object keyed by input
// name holding one row, the rows are stacked into one tensor per input
// with the datatype read from the JSON, and the answer's outputs are split
// back into one object per instance keyed by output name (tensor.go).
//
// The answer's output__0 (or output, the built-in runtime's name, or else
// the first numeric output) holds one row per instance: a classifier's
// positive-class probability ([N] or [N, 1]), its class probabilities
// ([N, K]), or a regressor's values. A BYTES output named label, when
// present, gives the labels.
//
// It owns no I/O: the gateway calls it on the request path, so it parses
// each body once and allocates little. It must not import the gateway.
package kserve
