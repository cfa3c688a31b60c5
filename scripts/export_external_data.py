#!/usr/bin/env python3
"""Writes the external-data fixtures of test/models/external/.

`weights.onnx` keeps its float initializers in `weights.onnx.data`
(data_location = EXTERNAL); `shape-only.onnx` is the same graph pointing at
`shape-only.onnx.data`, which does not exist: dtc must import both without
opening the data. An int64 shape initializer stays inline in both.
`shape-external.onnx` keeps every initializer, the int64 shape too, in
`shape-external.onnx.data`: the importer must read the shape from the model's
own directory, whatever the working directory.

    python scripts/export_external_data.py --out-dir test/models/external
"""
import argparse
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def build():
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(
        rng.standard_normal((16, 32)).astype(np.float32), "fc1.weight")
    b1 = numpy_helper.from_array(
        rng.standard_normal((32,)).astype(np.float32), "fc1.bias")
    w2 = numpy_helper.from_array(
        rng.standard_normal((32, 16)).astype(np.float32), "fc2.weight")
    shape = numpy_helper.from_array(np.array([2, 4, 16], np.int64), "shape")
    nodes = [
        helper.make_node("MatMul", ["x", "fc1.weight"], ["h0"], name="fc1"),
        helper.make_node("Add", ["h0", "fc1.bias"], ["h1"], name="fc1_bias"),
        helper.make_node("Relu", ["h1"], ["h2"], name="relu"),
        helper.make_node("MatMul", ["h2", "fc2.weight"], ["h3"], name="fc2"),
        helper.make_node("Reshape", ["h3", "shape"], ["y"], name="reshape"),
    ]
    graph = helper.make_graph(
        nodes, "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4, 16])],
        [w1, b1, w2, shape])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out-dir", default="test/models/external")
    args = parser.parse_args()
    os.makedirs(args.out_dir, exist_ok=True)
    for name, keep, threshold in (("weights", True, 64),
                                  ("shape-only", False, 64),
                                  ("shape-external", True, 0)):
        path = os.path.join(args.out_dir, name + ".onnx")
        data = name + ".onnx.data"
        # With threshold 64 only float tensors go external; the int64 shape
        # (24 bytes) stays inline.
        onnx.save_model(build(), path, save_as_external_data=True,
                        all_tensors_to_one_file=True, location=data,
                        size_threshold=threshold)
        if not keep:
            os.remove(os.path.join(args.out_dir, data))


if __name__ == "__main__":
    main()
