#!/usr/bin/env python3
"""Writes the malformed ONNX models of test/models/bad/ (error tests).

    python scripts/export_bad_models.py --out test/models/bad
"""
import argparse
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def model(nodes, inputs, outputs, inits=(), opsets=(("", 17),)):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    m = helper.make_model(
        graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets])
    m.ir_version = 8
    return m


def f32(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="test/models/bad")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    w = numpy_helper.from_array(np.ones((3, 3), np.float32), "w")
    cases = {
        # A node input nobody defines (the initializer 'w' is missing).
        "missing-initializer": model(
            [helper.make_node("MatMul", ["x", "w"], ["y"], name="proj")],
            [f32("x", [2, 3])], [f32("y", [2, 3])]),
        # a = Add(x, b), b = Relu(a): a cycle.
        "cycle": model(
            [helper.make_node("Add", ["x", "b"], ["a"], name="add"),
             helper.make_node("Relu", ["a"], ["b"], name="relu"),
             helper.make_node("Relu", ["b"], ["y"], name="out")],
            [f32("x", [2, 3])], [f32("y", [2, 3])]),
        # float32 + int64.
        "type-mismatch": model(
            [helper.make_node("Add", ["x", "i"], ["y"], name="add")],
            [f32("x", [2, 3]),
             helper.make_tensor_value_info("i", TensorProto.INT64, [2, 3])],
            [f32("y", [2, 3])]),
        # A com.microsoft op dtc does not lower.
        "unsupported-op": model(
            [helper.make_node("QuickGelu", ["x"], ["y"], name="act",
                              domain="com.microsoft")],
            [f32("x", [2, 3])], [f32("y", [2, 3])],
            opsets=(("", 17), ("com.microsoft", 1))),
        # A float input with a dynamic dim no flag binds.
        "unbound-dim": model(
            [helper.make_node("MatMul", ["x", "w"], ["y"], name="proj")],
            [f32("x", [2, "width"])], [f32("y", [2, 3])], [w]),
        # An input of 2^62 elements (over any cluster's memory).
        "huge-input": model(
            [helper.make_node("Relu", ["x"], ["y"], name="act")],
            [f32("x", [1 << 31, 1 << 31])], [f32("y", [1 << 31, 1 << 31])]),
        # A small input expanded to 2^52 elements by a constant shape.
        "huge-expand": model(
            [helper.make_node("Expand", ["x", "shape"], ["e"], name="grow"),
             helper.make_node("ReduceSum", ["e"], ["y"], name="sum",
                              keepdims=0)],
            [f32("x", [1, 1])], [f32("y", [])],
            [numpy_helper.from_array(
                np.array([1 << 26, 1 << 26], np.int64), "shape")]),
    }
    for name, m in cases.items():
        with open(os.path.join(args.out, name + ".onnx"), "wb") as f:
            f.write(m.SerializeToString())
    # The first 3000 bytes of a valid model.
    with open(os.path.join(args.out, "..", "hf", "gpt2.onnx"), "rb") as f:
        head = f.read(3000)
    with open(os.path.join(args.out, "truncated.onnx"), "wb") as f:
        f.write(head)


if __name__ == "__main__":
    main()
