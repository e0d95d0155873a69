// Package onnx loads ONNX models for the built-in runtime and scores batches
// of feature rows with the real ONNX Runtime, through the cgo binding
// github.com/yalue/onnxruntime_go. It owns the ONNX Runtime environment of the
// process and nothing else: it does not read the serving configuration, map
// features or answers, or batch requests (the runtime server does).
//
// # The library
//
// ONNX Runtime is a shared library opened at run time (dlopen), so the module
// builds without it. scripts/install-deps.sh fetches the build of the npm
// package onnxruntime-node 1.30.0 to
// ${XDG_CACHE_HOME:-$HOME/.cache}/modelplane/onnxruntime-1.30.0/libonnxruntime.so.1;
// MP_ONNXRUNTIME_LIB names another file. The first Load initialises the
// environment, once per process, because onnxruntime_go's environment is
// global; a missing library is an error naming the install command. The
// binding is cgo: a binary built with CGO_ENABLED=0 still builds, and its
// Load says it cannot load ONNX models.
//
// # Supported models
//
// A model has one float (float32) input of shape [batch, F], where F is fixed
// and batch is dynamic (-1 or a symbolic dimension), and one float output of
// shape [batch, K] or [batch]. Extra non-float outputs (the int64 label of a
// converted scikit-learn classifier) are ignored; more than one float output
// is refused, since nothing says which one is the answer. A batch of any size
// runs in one call.
//
// # Output kind
//
// Whether an output row is probabilities or regression values is decided in
// this order, first match wins:
//
//  1. the model's metadata_props entry "modelplane.output_kind", set to
//     "probability" or "value" (explicit; any other value is refused);
//  2. probability when the output's name contains "prob" (probabilities,
//     output_probability, prob), as converters name it;
//  3. probability when the node producing the output is Softmax or Sigmoid;
//  4. otherwise value.
//
// LogSoftmax outputs are log-probabilities, not probabilities, so they are
// values unless the metadata says otherwise.
//
// # Errors
//
// A model ONNX Runtime refuses (a bad graph, an unsupported operator) is an
// error carrying ONNX Runtime's own message, which validation shows to users
// as the reason the version is invalid.
package onnx
