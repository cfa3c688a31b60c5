#!/usr/bin/env python3
"""Writes the ONNX importer's regression inputs, test/fuzz/regressions/
onnx-*.onnx (docs/testing.md, "Findings"), each a small model that crashed
or misled the importer before its fix; test/frontends/onnx/
fuzz-regressions.test feeds each to `dtc compile`. The fuzz target reads
the same bytes behind one flags byte (0 here): printf '\\0' | cat - FILE.

Models marked `contrib` also import a com.microsoft opset: the ONNX checker
and shape inference skip such models, so dtc's own checks are all there is
(and the inputs reach dtc's host evaluator rather than ONNX's).

usage: make_onnx_regressions.py OUT_DIR   (needs the onnx Python package)
"""
import pathlib
import sys

import numpy as np
from onnx import TensorProto, helper, numpy_helper

out = pathlib.Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
I64MIN, I64MAX = -2**63, 2**63 - 1


def ints(name, values):
    return helper.make_node(
        "Constant", [], [name], name=name,
        value=numpy_helper.from_array(np.array(values, dtype=np.int64), name))


def floats(name, values):
    return helper.make_node(
        "Constant", [], [name], name=name,
        value=numpy_helper.from_array(np.array(values, dtype=np.float32),
                                      name))


def output(elem=TensorProto.INT64, shape=("n",)):
    return helper.make_tensor_value_info("y", elem, list(shape))


def x6():
    return helper.make_tensor_value_info("x", TensorProto.FLOAT, [6])


def save(name, nodes, outputs, inits=(), inputs=(), contrib=False):
    graph = helper.make_graph(nodes, "g", list(inputs), outputs, list(inits))
    opsets = [helper.make_opsetid("", 17)]
    if contrib:
        opsets.append(helper.make_opsetid("com.microsoft", 1))
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 8
    (out / f"onnx-{name}.onnx").write_bytes(model.SerializeToString())


# INT64_MIN / -1 and INT64_MIN % -1 trapped (SIGFPE) in the host evaluator.
save("div-overflow", [ints("a", I64MIN), ints("b", -1),
                      helper.make_node("Div", ["a", "b"], ["y"], name="div")],
     [output(shape=())])
save("mod-overflow", [ints("a", [I64MIN]), ints("b", [-1]),
                      helper.make_node("Mod", ["a", "b"], ["y"], name="mod")],
     [output()])
# A Slice step of INT64_MAX: a segfault in ONNX 1.12's data propagation;
# past it (or with the checks skipped), dtc's element count overflowed to -1
# and the result's allocation threw (abort).
save("slice-step-overflow",
     [ints("x", [1, 2, 3]), ints("s", [0]), ints("e", [3]), ints("ax", [0]),
      ints("st", [I64MAX]),
      helper.make_node("Slice", ["x", "s", "e", "ax", "st"], ["y"],
                       name="slice")],
     [output()])
save("slice-step-overflow-contrib",
     [ints("x", [1, 2, 3]), ints("s", [0]), ints("e", [3]), ints("ax", [0]),
      ints("st", [I64MAX]),
      helper.make_node("Slice", ["x", "s", "e", "ax", "st"], ["y"],
                       name="slice")],
     [output()], contrib=True)
# Shape of a Concat whose inputs differ in rank: ONNX 1.12's data
# propagation dereferenced the Concat's missing type (segfault in libonnx;
# found by the fuzzer in a mutated hf/llama.onnx, reduced by hand).
save("shape-of-bad-concat",
     [ints("a", [2]), ints("ax", [0]),
      helper.make_node("Unsqueeze", ["a", "ax"], ["u"], name="unsqueeze"),
      ints("b", [3]),
      helper.make_node("Concat", ["b", "u"], ["s"], axis=0, name="concat"),
      helper.make_node("Shape", ["s"], ["y"], name="shape")],
     [output(shape=(1,))])
# An int64 start with float limit and delta: read delta's (empty) ints.
save("range-mixed-types",
     [ints("s", 0), floats("l", 4.0), floats("d", 1.0),
      helper.make_node("Range", ["s", "l", "d"], ["y"], name="range")],
     [output()], contrib=True)
# Gather without indices: a null dereference.
save("gather-one-input",
     [ints("x", [1, 2, 3]), helper.make_node("Gather", ["x"], ["y"],
                                             name="gather")],
     [output()], contrib=True)
# Trilu with an empty k: read past it.
save("trilu-empty-k",
     [ints("x", [[1, 2], [3, 4]]), ints("k", np.zeros([0], np.int64)),
      helper.make_node("Trilu", ["x", "k"], ["y"], name="trilu")],
     [output(shape=(2, 2))], contrib=True)
# An int64 initializer of dims [2^40] without data: 8 TiB allocated before
# the data was counted.
save("initializer-huge",
     [helper.make_node("Reshape", ["x", "shape"], ["y"], name="reshape")],
     [output(TensorProto.FLOAT)],
     inits=[TensorProto(name="shape", data_type=TensorProto.INT64,
                        dims=[1 << 40])],
     inputs=[x6()], contrib=True)
# External data outside the model's directory was opened and read.
shape = TensorProto(name="shape", data_type=TensorProto.INT64, dims=[2],
                    data_location=TensorProto.EXTERNAL)
for key, value in (("location", "../../../../../../../../etc/hostname"),
                   ("offset", "0"), ("length", "16")):
    entry = shape.external_data.add()
    entry.key, entry.value = key, value
save("external-outside",
     [helper.make_node("Reshape", ["x", "shape"], ["y"], name="reshape")],
     [output(TensorProto.FLOAT)], inits=[shape], inputs=[x6()], contrib=True)
# Dropout with an empty training_mode read past it, on the host (constant
# data) and when lowered (a graph input).
for where, data in (("host", True), ("lowered", False)):
    nodes = [helper.make_node(
                 "Constant", [], ["r"], name="r",
                 value=numpy_helper.from_array(np.array(0.5, np.float32),
                                               "r")),
             helper.make_node(
                 "Constant", [], ["t"], name="t",
                 value=numpy_helper.from_array(np.zeros([0], bool), "t"))]
    inputs = []
    if data:
        nodes.append(floats("x", [1.0, 2.0]))
    else:
        inputs.append(helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                    [2]))
    nodes.append(helper.make_node("Dropout", ["x", "r", "t"], ["y"],
                                  name="dropout"))
    save(f"dropout-empty-mode-{where}", nodes,
         [output(TensorProto.FLOAT, (2,))], inputs=inputs, contrib=True)
