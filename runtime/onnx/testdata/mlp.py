"""Builds the ONNX models runtime/onnx's tests load, and NumPy's answers.

Usage: python3 mlp.py OUT_DIR

Writes OUT_DIR/<name>.onnx for each model and OUT_DIR/cases.json, which lists
every model with its opset, the output kind the package should decide, 64
random input rows and, for the models that run, NumPy's computation of the
same graph on those rows. Weights and inputs come from a fixed seed, so the
files are the same on every run. The models are built with onnx.helper only:
no framework, so the graph is exactly the one NumPy computes.
"""

import json
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROWS = 64


def init(name, a):
    return numpy_helper.from_array(np.asarray(a, dtype=np.float32), name)


def softmax(z):
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def sigmoid(z):
    return np.float32(1) / (np.float32(1) + np.exp(-z))


def save(out, name, graph, opset, metadata=None):
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                          producer_name="modelplane-test")
    # ONNX Runtime 1.30 reads IR version 8 (ONNX 1.12's default) and later.
    m.ir_version = 8
    for k, v in (metadata or {}).items():
        entry = m.metadata_props.add()
        entry.key, entry.value = k, v
    path = os.path.join(out, name + ".onnx")
    onnx.save(m, path)
    return name + ".onnx"


def mlp_softmax(rng, out, opset, name, metadata=None):
    """Gemm, Relu, MatMul+Add, Tanh, Gemm, Softmax: a 3-class classifier."""
    f, h1, h2, k = 6, 16, 8, 3
    w1 = rng.normal(size=(h1, f)).astype(np.float32)
    b1 = rng.normal(size=h1).astype(np.float32)
    w2 = rng.normal(size=(h1, h2)).astype(np.float32)
    b2 = rng.normal(size=h2).astype(np.float32)
    w3 = rng.normal(size=(h2, k)).astype(np.float32)
    b3 = rng.normal(size=k).astype(np.float32)
    nodes = [
        helper.make_node("Gemm", ["x", "w1", "b1"], ["g1"], transB=1),
        helper.make_node("Relu", ["g1"], ["r1"]),
        helper.make_node("MatMul", ["r1", "w2"], ["m2"]),
        helper.make_node("Add", ["m2", "b2"], ["a2"]),
        helper.make_node("Tanh", ["a2"], ["t2"]),
        helper.make_node("Gemm", ["t2", "w3", "b3"], ["g3"]),
        helper.make_node("Softmax", ["g3"], ["y"], axis=-1),
    ]
    graph = helper.make_graph(
        nodes, name,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", f])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", k])],
        [init("w1", w1), init("b1", b1), init("w2", w2), init("b2", b2),
         init("w3", w3), init("b3", b3)])
    x = rng.normal(size=(ROWS, f)).astype(np.float32)
    t2 = np.tanh(np.maximum(x @ w1.T + b1, 0) @ w2 + b2)
    y = softmax(t2 @ w3 + b3)
    return save(out, name, graph, opset, metadata), x, y


def mlp_regression(rng, out, opset, name):
    """Gemm, Relu, Gemm to one value, Reshape to [batch]: a regressor whose
    batch dimension is left unnamed (-1 to ONNX Runtime)."""
    f, h = 5, 12
    w1 = rng.normal(size=(h, f)).astype(np.float32)
    b1 = rng.normal(size=h).astype(np.float32)
    w2 = rng.normal(size=(h, 1)).astype(np.float32)
    b2 = rng.normal(size=1).astype(np.float32)
    shape = numpy_helper.from_array(np.array([-1], dtype=np.int64), "shape")
    nodes = [
        helper.make_node("Gemm", ["x", "w1", "b1"], ["g1"], transB=1),
        helper.make_node("Relu", ["g1"], ["r1"]),
        helper.make_node("Gemm", ["r1", "w2", "b2"], ["g2"]),
        helper.make_node("Reshape", ["g2", "shape"], ["value"]),
    ]
    graph = helper.make_graph(
        nodes, name,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, f])],
        [helper.make_tensor_value_info("value", TensorProto.FLOAT, [None])],
        [init("w1", w1), init("b1", b1), init("w2", w2), init("b2", b2), shape])
    x = rng.normal(size=(ROWS, f)).astype(np.float32)
    y = (np.maximum(x @ w1.T + b1, 0) @ w2 + b2).reshape(-1, 1)
    return save(out, name, graph, opset), x, y


def mlp_binary(rng, out, opset, name):
    """Gemm, Tanh, Gemm to one value, Sigmoid: a binary classifier."""
    f, h = 4, 10
    w1 = rng.normal(size=(h, f)).astype(np.float32)
    b1 = rng.normal(size=h).astype(np.float32)
    w2 = rng.normal(size=(h, 1)).astype(np.float32)
    b2 = rng.normal(size=1).astype(np.float32)
    nodes = [
        helper.make_node("Gemm", ["x", "w1", "b1"], ["g1"], transB=1),
        helper.make_node("Tanh", ["g1"], ["t1"]),
        helper.make_node("Gemm", ["t1", "w2", "b2"], ["g2"]),
        helper.make_node("Sigmoid", ["g2"], ["score"]),
    ]
    graph = helper.make_graph(
        nodes, name,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", f])],
        [helper.make_tensor_value_info("score", TensorProto.FLOAT, ["n", 1])],
        [init("w1", w1), init("b1", b1), init("w2", w2), init("b2", b2)])
    x = rng.normal(size=(ROWS, f)).astype(np.float32)
    y = sigmoid(np.tanh(x @ w1.T + b1) @ w2 + b2)
    return save(out, name, graph, opset), x, y


def named_probabilities(rng, out, opset, name):
    """A label output (int64, ignored) beside a float output named
    probabilities that no Softmax produces: the name alone decides."""
    f, k = 3, 2
    w = rng.normal(size=(f, k)).astype(np.float32)
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["probabilities"]),
        helper.make_node("ArgMax", ["probabilities"], ["label"], axis=1, keepdims=0),
    ]
    graph = helper.make_graph(
        nodes, name,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", f])],
        [helper.make_tensor_value_info("label", TensorProto.INT64, ["batch"]),
         helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, ["batch", k])],
        [init("w", w)])
    x = rng.normal(size=(ROWS, f)).astype(np.float32)
    return save(out, name, graph, opset), x, x @ w


def refused(out, opset):
    """Models ONNX Runtime refuses, and models it loads but the package does
    not support, each with the words its error must carry."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 2])
    cases = []

    def add(name, graph, want):
        cases.append({"name": name, "file": save(out, name, graph, opset), "want": want})

    add("unsupported_op",
        helper.make_graph([helper.make_node("NoSuchOp", ["x"], ["y"])], "u", [x], [y]),
        ["NoSuchOp", "No Op registered for NoSuchOp"])
    add("undefined_input",
        helper.make_graph([helper.make_node("Add", ["x", "missing"], ["y"])], "d", [x], [y]),
        ["Node input 'missing' is not a graph input"])
    add("two_inputs",
        helper.make_graph([helper.make_node("Add", ["x", "x2"], ["y"])], "t",
                          [x, helper.make_tensor_value_info("x2", TensorProto.FLOAT, ["batch", 2])], [y]),
        ["2 inputs, want 1"])
    add("int_input",
        helper.make_graph([helper.make_node("Cast", ["xi"], ["y"], to=TensorProto.FLOAT)], "i",
                          [helper.make_tensor_value_info("xi", TensorProto.INT64, ["batch", 2])], [y]),
        ["input \"xi\" holds", "INT64, want float"])
    add("fixed_batch",
        helper.make_graph([helper.make_node("Relu", ["xf"], ["y"])], "f",
                          [helper.make_tensor_value_info("xf", TensorProto.FLOAT, [1, 2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2])]),
        ["batch dimension must be dynamic"])
    add("rank3_output",
        helper.make_graph([helper.make_node("Unsqueeze", ["x", "axes"], ["y3"])], "r", [x],
                          [helper.make_tensor_value_info("y3", TensorProto.FLOAT, ["batch", 2, 1])],
                          [numpy_helper.from_array(np.array([2], dtype=np.int64), "axes")]),
        ["output \"y3\"", "want [batch, K] or [batch]"])
    return cases


def main():
    out = sys.argv[1]
    rng = np.random.default_rng(20261201)
    runs = []
    for opset in (13, 17):
        for build, kind in ((mlp_softmax, "probability"), (mlp_regression, "value"),
                            (mlp_binary, "probability"), (named_probabilities, "probability")):
            name = "%s_opset%d" % (build.__name__, opset)
            file, x, y = build(rng, out, opset, name)
            runs.append({"name": name, "file": file, "opset": opset, "kind": kind,
                         "rank": 1 if build is mlp_regression else 2,
                         "inputs": x.tolist(), "want": np.asarray(y, dtype=np.float32).tolist()})
    # The metadata entry overrides what the Softmax says.
    file, x, y = mlp_softmax(rng, out, 17, "metadata_value", {"modelplane.output_kind": "value"})
    runs.append({"name": "metadata_value", "file": file, "opset": 17, "kind": "value", "rank": 2,
                 "inputs": x.tolist(), "want": y.astype(np.float32).tolist()})
    bad = refused(out, 17)
    file, _, _ = mlp_softmax(rng, out, 17, "metadata_bad", {"modelplane.output_kind": "scores"})
    bad.append({"name": "metadata_bad", "file": file, "want": ["modelplane.output_kind", "\"scores\""]})
    with open(os.path.join(out, "cases.json"), "w") as f:
        json.dump({"onnx": onnx.__version__, "numpy": np.__version__, "runs": runs, "refused": bad}, f)


if __name__ == "__main__":
    main()
