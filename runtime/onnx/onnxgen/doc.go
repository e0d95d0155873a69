// Package onnxgen writes ONNX models (serialised onnx.ModelProto) from Go,
// so that the platform can make real ONNX files without Python: the demo's
// fraud model and the benchmarks' large MLPs. It owns the encoding of the few
// parts of onnx.proto those models need — a graph of nodes with attributes,
// float and int64 initializers, typed inputs and outputs, opset imports and
// metadata — with google.golang.org/protobuf/encoding/protowire, and nothing
// else: it does not load, check or run models (ONNX Runtime does, through
// package onnx) and does not read ONNX files.
//
// # Writing
//
// A Model is written by Model.WriteTo, which streams each initializer's
// values to the writer in chunks: a 200 MB MLP whose weights come from a
// Fill function is never held in memory at all, and one whose weights are
// given as slices is not copied. Model.Bytes returns the same bytes in
// memory. The output is deterministic: the same Model writes the same bytes.
//
// # MLPs
//
// MLP builds the Model of a multi-layer perceptron: input "input" of shape
// [batch, inputs], then per layer MatMul by a [in, units] weight, Add of a
// [units] bias and the layer's activation (none, Relu or Sigmoid); the last
// layer's result is the output. Weights the caller does not give are drawn
// from Uniform, a counter-based generator: the value at any index depends
// only on the seed and the index, so a test can recompute any weight without
// the writer keeping them.
//
// Models are written with IR version 8 and opset 17 by default, which ONNX
// Runtime 1.30 and Debian's python3-onnx 1.12 both load.
package onnxgen
