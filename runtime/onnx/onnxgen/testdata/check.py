"""Checks ONNX files written by package onnxgen with ONNX's own tools.

Usage: python3 check.py CASES_JSON

CASES_JSON lists {"file": path, "inputs": rows} items. For each file this runs
onnx.checker.check_model (full_check, so shapes are inferred too), then
computes the graph with NumPy from the initializers ONNX itself decoded,
node by node, and prints a JSON list of the outputs (one list of rows per
file). Only the operators onnxgen's MLPs use are interpreted; any other is
an error, so the check never passes by skipping a node.
"""

import json
import sys

import numpy as np
import onnx
from onnx import numpy_helper


def run(model, x):
    env = {model.graph.input[0].name: np.asarray(x, dtype=np.float32)}
    for t in model.graph.initializer:
        env[t.name] = numpy_helper.to_array(t)
    for n in model.graph.node:
        a = [env[i] for i in n.input]
        if n.op_type == "MatMul":
            y = a[0] @ a[1]
        elif n.op_type == "Add":
            y = a[0] + a[1]
        elif n.op_type == "Relu":
            y = np.maximum(a[0], np.float32(0))
        elif n.op_type == "Sigmoid":
            y = np.float32(1) / (np.float32(1) + np.exp(-a[0]))
        else:
            raise SystemExit("operator %s not interpreted" % n.op_type)
        env[n.output[0]] = y.astype(np.float32)
    return env[model.graph.output[0].name]


def main():
    with open(sys.argv[1]) as f:
        cases = json.load(f)
    outs = []
    for c in cases:
        m = onnx.load(c["file"])
        onnx.checker.check_model(m, full_check=True)
        outs.append(run(m, c["inputs"]).tolist())
    json.dump(outs, sys.stdout)


main()
