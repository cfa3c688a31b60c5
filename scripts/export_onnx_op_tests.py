#!/usr/bin/env python3
"""Write small single-purpose ONNX models with reference outputs.

Each case exercises one part of dtc's ONNX importer (an op mapping, an
attribute variant, host-side evaluation, an idiom the importer raises). The
reference outputs come from onnxruntime, so the importer's tests compare the
imported dtc IR against an independent ONNX implementation.

Layout (from the repository root):
    test/models/onnx-ops/<case>.onnx
    test/models/onnx-ops/<case>/test_data_set_0/{input,output}_<i>.pb

Usage:
    python scripts/export_onnx_op_tests.py [--out test/models/onnx-ops]
"""

import argparse
import os

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
F = TensorProto.FLOAT
I64 = TensorProto.INT64
INT64_MAX = np.iinfo(np.int64).max


def rand(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def init(name, array):
    return numpy_helper.from_array(np.asarray(array), name)


def const(name, array):
    """A Constant node producing `name`."""
    return helper.make_node("Constant", [], [name], name=name + "_node",
                            value=numpy_helper.from_array(np.asarray(array)))


def model(nodes, inputs, outputs, initializers=(), opset=17):
    graph = helper.make_graph(nodes, "case", inputs, outputs,
                              list(initializers))
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                          producer_name="dtc-op-tests")
    m.ir_version = 8 if opset < 21 else 10
    return m


def ms_model(nodes, inputs, outputs, initializers=()):
    """A model with com.microsoft contrib ops (onnxruntime's optimizer)."""
    graph = helper.make_graph(nodes, "case", inputs, outputs,
                              list(initializers))
    m = helper.make_model(graph, opset_imports=[
        helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)],
        producer_name="dtc-op-tests")
    m.ir_version = 8
    return m


def vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def cases(rng):
    """Yields (name, model, feeds)."""
    # Gemm with transB, alpha, beta and a broadcast C.
    yield "gemm", model(
        [helper.make_node("Gemm", ["a", "b", "c"], ["y"], name="gemm",
                          transB=1, alpha=0.5, beta=2.0)],
        [vi("a", F, [3, 4])], [vi("y", F, [3, 5])],
        [init("b", rand(rng, 5, 4)), init("c", rand(rng, 5))]), {
            "a": rand(rng, 3, 4)}
    yield "gemm_transa", model(
        [helper.make_node("Gemm", ["a", "b"], ["y"], name="gemm", transA=1)],
        [vi("a", F, [4, 3]), vi("b", F, [4, 5])], [vi("y", F, [3, 5])]), {
            "a": rand(rng, 4, 3), "b": rand(rng, 4, 5)}

    # MatMul: 1-D operands and batch broadcasting.
    yield "matmul", model(
        [helper.make_node("MatMul", ["v", "w"], ["y0"], name="vec_mat"),
         helper.make_node("MatMul", ["m", "v"], ["y1"], name="mat_vec"),
         helper.make_node("MatMul", ["a", "b"], ["y2"], name="batched")],
        [vi("v", F, [4]), vi("m", F, [2, 3, 4]), vi("a", F, [2, 1, 3, 4]),
         vi("b", F, [5, 4, 6])],
        [vi("y0", F, [3]), vi("y1", F, [2, 3]), vi("y2", F, [2, 5, 3, 6])],
        [init("w", rand(rng, 4, 3))]), {
            "v": rand(rng, 4), "m": rand(rng, 2, 3, 4),
            "a": rand(rng, 2, 1, 3, 4), "b": rand(rng, 5, 4, 6)}

    # Elementwise ops, broadcasting against parameters and constants.
    unary = ["Neg", "Exp", "Tanh", "Erf", "Sigmoid", "Relu", "Abs"]
    nodes = [helper.make_node(op, ["x"], [op.lower()], name=op)
             for op in unary]
    nodes += [
        helper.make_node("Abs", ["x"], ["ax"], name="abs_for_log"),
        const("one", np.float32(1.0)),
        helper.make_node("Add", ["ax", "one"], ["ax1"], name="plus_one"),
        helper.make_node("Log", ["ax1"], ["log"], name="Log"),
        helper.make_node("Sqrt", ["ax1"], ["sqrt"], name="Sqrt"),
        helper.make_node("Reciprocal", ["ax1"], ["reciprocal"],
                         name="Reciprocal"),
        helper.make_node("Sub", ["x", "p"], ["sub"], name="Sub"),
        helper.make_node("Div", ["x", "ax1"], ["div"], name="Div"),
        helper.make_node("Max", ["x", "p", "y"], ["max"], name="Max"),
        helper.make_node("Min", ["x", "p"], ["min"], name="Min"),
        const("two", np.int64(2)),
        helper.make_node("Pow", ["x", "two"], ["pow"], name="Pow"),
        helper.make_node("Mul", ["p", "x"], ["mul"], name="Mul"),
        helper.make_node("Sum", ["x", "y", "p"], ["sum"], name="Sum"),
    ]
    names = [op.lower() for op in unary] + [
        "log", "sqrt", "reciprocal", "sub", "div", "max", "min", "pow", "mul",
        "sum"]
    yield "elementwise", model(
        nodes, [vi("x", F, [2, 3, 4]), vi("y", F, [3, 4])],
        [vi(n, F, [2, 3, 4]) for n in names],
        [init("p", rand(rng, 4))]), {
            "x": rand(rng, 2, 3, 4), "y": rand(rng, 3, 4)}

    # Softmax on a middle axis, LayerNormalization over two dims, no bias.
    yield "softmax_layernorm", model(
        [helper.make_node("Softmax", ["x"], ["s"], name="softmax", axis=1),
         helper.make_node("LayerNormalization", ["x", "scale"], ["ln"],
                          name="ln", axis=1, epsilon=1e-3)],
        [vi("x", F, [2, 3, 4])], [vi("s", F, [2, 3, 4]),
                                  vi("ln", F, [2, 3, 4])],
        [init("scale", rand(rng, 3, 4))]), {"x": rand(rng, 2, 3, 4)}

    # Reshape (0 and -1), Flatten, Unsqueeze, Squeeze, default Transpose.
    yield "reshapes", model(
        [const("shape", np.array([0, -1, 2], np.int64)),
         helper.make_node("Reshape", ["x", "shape"], ["r"], name="reshape"),
         helper.make_node("Flatten", ["x"], ["f"], name="flatten", axis=2),
         const("uaxes", np.array([0, -1], np.int64)),
         helper.make_node("Unsqueeze", ["x", "uaxes"], ["u"], name="unsq"),
         const("saxes", np.array([0], np.int64)),
         helper.make_node("Squeeze", ["u", "saxes"], ["sq"], name="sq"),
         helper.make_node("Transpose", ["x"], ["t"], name="transpose")],
        [vi("x", F, [2, 3, 4])],
        [vi("r", F, [2, 6, 2]), vi("f", F, [6, 4]), vi("sq", F, [2, 3, 4, 1]),
         vi("t", F, [4, 3, 2])]), {"x": rand(rng, 2, 3, 4)}

    # Slice with negative starts, clamped ends and steps; Split by sizes.
    yield "slice_split", model(
        [const("starts", np.array([-3, 1], np.int64)),
         const("ends", np.array([INT64_MAX, 100], np.int64)),
         const("axes", np.array([2, 1], np.int64)),
         const("steps", np.array([2, 1], np.int64)),
         helper.make_node("Slice", ["x", "starts", "ends", "axes", "steps"],
                          ["s"], name="slice"),
         const("sizes", np.array([1, 3, 2], np.int64)),
         helper.make_node("Split", ["x", "sizes"], ["p0", "p1", "p2"],
                          name="split", axis=-1)],
        [vi("x", F, [2, 3, 6])],
        [vi("s", F, [2, 2, 2]), vi("p0", F, [2, 3, 1]),
         vi("p1", F, [2, 3, 3]), vi("p2", F, [2, 3, 2])]), {
            "x": rand(rng, 2, 3, 6)}
    # Opset 18: Split by num_outputs (uneven), ReduceMean axes as an input.
    yield "opset18", model(
        [helper.make_node("Split", ["x"], ["p0", "p1", "p2"], name="split",
                          axis=2, num_outputs=3),
         const("axes", np.array([1], np.int64)),
         helper.make_node("ReduceMean", ["x", "axes"], ["m"], name="mean",
                          keepdims=0)],
        [vi("x", F, [2, 3, 7])],
        [vi("p0", F, [2, 3, 3]), vi("p1", F, [2, 3, 3]),
         vi("p2", F, [2, 3, 1]), vi("m", F, [2, 7])], opset=18), {
            "x": rand(rng, 2, 3, 7)}

    # Gather: token lookup, non-contiguous ids on axis 1, a scalar index.
    yield "gather", model(
        [helper.make_node("Gather", ["table", "ids"], ["emb"], name="lookup"),
         const("pick", np.array([[0, 2], [3, 1]], np.int64)),
         helper.make_node("Gather", ["x", "pick"], ["g1"], name="pick",
                          axis=1),
         const("last", np.int64(-1)),
         helper.make_node("Gather", ["x", "last"], ["g2"], name="last",
                          axis=2)],
        [vi("ids", I64, [2, 3]), vi("x", F, [2, 4, 5])],
        [vi("emb", F, [2, 3, 4]), vi("g1", F, [2, 2, 2, 5]),
         vi("g2", F, [2, 4])],
        [init("table", rand(rng, 10, 4))]), {
            "ids": rng.integers(0, 10, (2, 3)).astype(np.int64),
            "x": rand(rng, 2, 4, 5)}

    # Where with a constant condition: masked_fill(-inf) and a blend.
    mask = np.triu(np.ones((4, 4), bool), k=1)
    yield "where", model(
        [const("mask", mask), const("neg_inf", np.float32(-np.inf)),
         helper.make_node("Where", ["mask", "neg_inf", "x"], ["filled"],
                          name="masked_fill"),
         helper.make_node("Where", ["mask", "x", "y"], ["blend"],
                          name="blend"),
         const("zero", np.float32(0.0)),
         helper.make_node("Where", ["mask", "y", "zero"], ["keep"],
                          name="keep")],
        [vi("x", F, [2, 4, 4]), vi("y", F, [4])],
        [vi("filled", F, [2, 4, 4]), vi("blend", F, [2, 4, 4]),
         vi("keep", F, [4, 4])]), {"x": rand(rng, 2, 4, 4),
                                   "y": rand(rng, 4)}

    # Expand of computed tensors, reductions, Cast + Concat + Identity.
    yield "expand_reduce_cast", model(
        [const("shape", np.array([2, 3, 4], np.int64)),
         helper.make_node("Expand", ["x", "shape"], ["e"], name="expand"),
         const("shape2", np.array([1, 4], np.int64)),
         helper.make_node("Expand", ["v", "shape2"], ["e2"], name="expand2"),
         helper.make_node("ReduceMax", ["e"], ["rmax"], name="rmax",
                          axes=[-1], keepdims=1),
         const("raxes", np.array([0, 2], np.int64)),
         helper.make_node("ReduceSum", ["e", "raxes"], ["rsum"],
                          name="rsum", keepdims=0),
         helper.make_node("Cast", ["ids"], ["fids"], name="cast", to=F),
         helper.make_node("Concat", ["fids", "e2"], ["cat"], name="concat",
                          axis=0),
         helper.make_node("Identity", ["cat"], ["out"], name="identity")],
        [vi("x", F, [3, 1]), vi("v", F, [4]), vi("ids", I64, [2, 4])],
        [vi("e", F, [2, 3, 4]), vi("rmax", F, [2, 3, 1]), vi("rsum", F, [3]),
         vi("out", F, [3, 4])]), {
            "x": rand(rng, 3, 1), "v": rand(rng, 4),
            "ids": rng.integers(-5, 5, (2, 4)).astype(np.int64)}

    # GPT-2's tanh GELU written out, and the opset-20 Gelu op.
    yield "gelu_tanh", model(
        [const("three", np.float32(3.0)), const("c", np.float32(0.044715)),
         const("k", np.float32(np.sqrt(2 / np.pi))),
         const("one", np.float32(1.0)), const("half", np.float32(0.5)),
         helper.make_node("Pow", ["x", "three"], ["x3"], name="pow"),
         helper.make_node("Mul", ["c", "x3"], ["cx3"], name="mul_c"),
         helper.make_node("Add", ["x", "cx3"], ["inner"], name="add_inner"),
         helper.make_node("Mul", ["k", "inner"], ["arg"], name="mul_k"),
         helper.make_node("Tanh", ["arg"], ["t"], name="tanh"),
         helper.make_node("Add", ["one", "t"], ["t1"], name="add_one"),
         helper.make_node("Mul", ["half", "x"], ["hx"], name="mul_half"),
         helper.make_node("Mul", ["hx", "t1"], ["y"], name="gelu_out")],
        [vi("x", F, [2, 8])], [vi("y", F, [2, 8])]), {"x": rand(rng, 2, 8) * 3}
    yield "gelu_op", model(
        [helper.make_node("Gelu", ["x"], ["y0"], name="gelu"),
         helper.make_node("Gelu", ["x"], ["y1"], name="gelu_tanh",
                          approximate="tanh")],
        [vi("x", F, [2, 8])], [vi("y0", F, [2, 8]), vi("y1", F, [2, 8])],
        opset=20), {"x": rand(rng, 2, 8) * 3}

    # Host evaluation: everything but the final Adds depends only on
    # constants and shapes, so the importer computes it; onnxruntime checks
    # the semantics of each host op.
    f32 = np.float32
    yield "host_eval", model(
        [helper.make_node("Shape", ["x"], ["s"], name="shape"),
         const("c0", np.int64(0)), const("c1", np.int64(1)),
         const("c2", np.int64(2)), const("cm1", np.array([-1], np.int64)),
         helper.make_node("Gather", ["s", "c1"], ["rows"], name="rows"),
         helper.make_node("Gather", ["s", "c2"], ["cols"], name="cols"),
         helper.make_node("Range", ["c0", "cols", "c1"], ["r"], name="range"),
         helper.make_node("Cast", ["r"], ["rf"], name="cast_r", to=F),
         const("three", np.int64(3)),
         helper.make_node("Sub", ["r", "three"], ["rm"], name="sub3"),
         helper.make_node("Mod", ["rm", "three"], ["mod"], name="mod"),
         const("neg2", np.int64(-2)),
         helper.make_node("Div", ["rm", "neg2"], ["idiv"], name="idiv"),
         helper.make_node("Add", ["mod", "idiv"], ["ints"], name="ints"),
         helper.make_node("Cast", ["ints"], ["intsf"], name="cast_i", to=F),
         helper.make_node("Unsqueeze", ["rows", "cm1"], ["rows1"],
                          name="unsq_rows"),
         helper.make_node("Unsqueeze", ["cols", "cm1"], ["cols1"],
                          name="unsq_cols"),
         helper.make_node("Concat", ["rows1", "cols1"], ["rc"], name="rc",
                          axis=0),
         helper.make_node("ConstantOfShape", ["rc"], ["ones"], name="ones",
                          value=numpy_helper.from_array(np.array([2.5], f32))),
         helper.make_node("Trilu", ["ones", "c1"], ["tri"], name="tri",
                          upper=1),
         helper.make_node("Trilu", ["ones"], ["tril"], name="tril", upper=0),
         helper.make_node("Less", ["tri", "tril"], ["lt"], name="less"),
         helper.make_node("Not", ["lt"], ["nlt"], name="not"),
         helper.make_node("Equal", ["tri", "tril"], ["eq"], name="equal"),
         helper.make_node("Or", ["nlt", "eq"], ["cond"], name="or"),
         const("half", f32(0.5)), const("minus", f32(-1.75)),
         helper.make_node("Where", ["cond", "half", "minus"], ["w"],
                          name="where"),
         helper.make_node("Floor", ["w"], ["fl"], name="floor"),
         helper.make_node("Ceil", ["w"], ["ce"], name="ceil"),
         helper.make_node("Sign", ["w"], ["sg"], name="sign"),
         helper.make_node("Sum", ["fl", "ce", "sg", "tri"], ["m"],
                          name="sum"),
         const("reps", np.array([3], np.int64)),
         helper.make_node("Tile", ["rf", "reps"], ["tiled"], name="tile"),
         const("st", np.array([-1], np.int64)),
         const("en", np.array([-100], np.int64)),
         const("ax", np.array([0], np.int64)),
         const("sp", np.array([-2], np.int64)),
         helper.make_node("Slice", ["tiled", "st", "en", "ax", "sp"],
                          ["rev"], name="reverse"),
         helper.make_node("ReduceProd", ["m"], ["prod"], name="prod",
                          axes=[0], keepdims=0),
         helper.make_node("ReduceMin", ["m"], ["mn"], name="min",
                          axes=[1], keepdims=1),
         helper.make_node("Add", ["x", "m"], ["y0"], name="y0"),
         helper.make_node("Add", ["prod", "mn"], ["pm"], name="pm"),
         helper.make_node("Add", ["x", "pm"], ["y1"], name="y1"),
         helper.make_node("Add", ["x", "rf"], ["y2"], name="y2"),
         helper.make_node("Add", ["x", "intsf"], ["y3"], name="y3"),
         helper.make_node("Add", ["rev", "rev"], ["y4"], name="y4")],
        [vi("x", F, [2, 4, 5])],
        [vi("y0", F, [2, 4, 5]), vi("y1", F, [2, 4, 5]),
         vi("y2", F, [2, 4, 5]), vi("y3", F, [2, 4, 5]),
         vi("y4", F, [8])]), {"x": rand(rng, 2, 4, 5)}

    # Non-causal attention with the scale applied to the scores.
    yield "attention", model(
        [helper.make_node("Transpose", ["k"], ["kt"], name="kt",
                          perm=[0, 1, 3, 2]),
         helper.make_node("MatMul", ["q", "kt"], ["qk"], name="qk"),
         const("scale", np.float32(0.3)),
         helper.make_node("Mul", ["qk", "scale"], ["scores"], name="scale"),
         helper.make_node("Softmax", ["scores"], ["p"], name="softmax"),
         helper.make_node("MatMul", ["p", "v"], ["y"], name="pv")],
        [vi("q", F, [1, 2, 3, 4]), vi("k", F, [1, 2, 5, 4]),
         vi("v", F, [1, 2, 5, 6])], [vi("y", F, [1, 2, 3, 6])]), {
            "q": rand(rng, 1, 2, 3, 4), "k": rand(rng, 1, 2, 5, 4),
            "v": rand(rng, 1, 2, 5, 6)}

    # Cross-entropy as torch exports F.cross_entropy (ignore_index -100;
    # one ignored position).
    labels = np.array([1, 9, -100, 0, 4, 4], np.int64)
    yield "ce_softmax_loss", model(
        [helper.make_node("SoftmaxCrossEntropyLoss", ["x", "t"], ["loss"],
                          name="loss", reduction="mean", ignore_index=-100)],
        [vi("x", F, [6, 10]), vi("t", I64, [6])], [vi("loss", F, [])]), {
            "x": rand(rng, 6, 10), "t": labels}

    # [N, C, d] scores: the class dim is dim 1.
    yield "ce_softmax_loss_3d", model(
        [helper.make_node("SoftmaxCrossEntropyLoss", ["x", "t"], ["loss"],
                          name="loss")],
        [vi("x", F, [2, 10, 3]), vi("t", I64, [2, 3])],
        [vi("loss", F, [])]), {
            "x": rand(rng, 2, 10, 3),
            "t": np.array([[1, 2, 3], [9, 0, 5]], np.int64)}

    # com.microsoft Attention (packed QKV, causal) and SkipLayerNormalization
    # with bias and the residual-sum output, FastGelu with bias, BiasGelu.
    ms = "com.microsoft"
    yield "ms_attention", ms_model(
        [helper.make_node("Attention", ["x", "w", "b"], ["y"], name="attn",
                          domain=ms, num_heads=2, unidirectional=1)],
        [vi("x", F, [2, 5, 8])], [vi("y", F, [2, 5, 8])],
        [init("w", rand(rng, 8, 24) * 0.5), init("b", rand(rng, 24))]), {
            "x": rand(rng, 2, 5, 8)}
    yield "ms_skip_ln_gelu", ms_model(
        [helper.make_node("SkipLayerNormalization",
                          ["x", "skip", "gamma", "beta", "bias"],
                          ["ln", "", "", "sum"], name="skipln", domain=ms,
                          epsilon=1e-5),
         helper.make_node("FastGelu", ["ln", "fb"], ["g"], name="fastgelu",
                          domain=ms),
         helper.make_node("BiasGelu", ["g", "fb"], ["g2"], name="biasgelu",
                          domain=ms),
         helper.make_node("Add", ["g2", "sum"], ["y"], name="residual")],
        [vi("x", F, [2, 3, 8]), vi("skip", F, [2, 3, 8])],
        [vi("y", F, [2, 3, 8])],
        [init("gamma", rand(rng, 8)), init("beta", rand(rng, 8)),
         init("bias", rand(rng, 8)), init("fb", rand(rng, 8))]), {
            "x": rand(rng, 2, 3, 8), "skip": rand(rng, 2, 3, 8)}

    # F.nll_loss(F.log_softmax(x, 1), t): LogSoftmax +
    # NegativeLogLikelihoodLoss.
    yield "ce_logsoftmax_nll", model(
        [helper.make_node("LogSoftmax", ["x"], ["lp"], name="logsoftmax",
                          axis=1),
         helper.make_node("NegativeLogLikelihoodLoss", ["lp", "t"], ["loss"],
                          name="nll", reduction="mean", ignore_index=-100)],
        [vi("x", F, [6, 10]), vi("t", I64, [6])], [vi("loss", F, [])]), {
            "x": rand(rng, 6, 10), "t": labels}

    # onnxruntime's RMSNorm (default domain), MultiHeadAttention (causal,
    # bias), RotaryEmbedding (3-D input with per-token positions; 4-D input,
    # interleaved pairs, partial rotary dim) and GroupQueryAttention (4 query
    # heads over 2 kv heads, rotary inside, full-length sequences).
    yield "ms_simplified_ln", ms_model(
        [helper.make_node("SimplifiedLayerNormalization", ["x", "g"], ["y"],
                          name="rmsnorm", axis=-1, epsilon=1e-6)],
        [vi("x", F, [2, 3, 8])], [vi("y", F, [2, 3, 8])],
        [init("g", rand(rng, 8))]), {"x": rand(rng, 2, 3, 8)}
    yield "ms_mha", ms_model(
        [helper.make_node("MultiHeadAttention", ["q", "k", "v", "b"], ["y"],
                          name="mha", domain=ms, num_heads=2,
                          unidirectional=1)],
        [vi("q", F, [2, 5, 8]), vi("k", F, [2, 5, 8]), vi("v", F, [2, 5, 8])],
        [vi("y", F, [2, 5, 8])], [init("b", rand(rng, 24))]), {
            "q": rand(rng, 2, 5, 8), "k": rand(rng, 2, 5, 8),
            "v": rand(rng, 2, 5, 8)}
    angles = np.outer(np.arange(16), 1.0 / 10000 ** (np.arange(4) / 4))
    cos4, sin4 = np.cos(angles).astype(np.float32), \
        np.sin(angles).astype(np.float32)
    yield "ms_rotary", ms_model(
        [helper.make_node("RotaryEmbedding", ["x", "pos", "cos", "sin"],
                          ["y1"], name="rope", domain=ms, num_heads=2),
         helper.make_node("RotaryEmbedding", ["x4", "off", "cos2", "sin2"],
                          ["y2"], name="rope_pairs", domain=ms,
                          interleaved=1, rotary_embedding_dim=4,
                          num_heads=2)],
        [vi("x", F, [2, 5, 16]), vi("x4", F, [2, 2, 5, 8])],
        [vi("y1", F, [2, 5, 16]), vi("y2", F, [2, 2, 5, 8])],
        [init("pos", np.array([[0, 1, 2, 3, 4], [3, 4, 5, 6, 7]], np.int64)),
         init("off", np.array([2], np.int64)),
         init("cos", cos4), init("sin", sin4),
         init("cos2", cos4[:, :2].copy()), init("sin2", sin4[:, :2].copy())]), {
            "x": rand(rng, 2, 5, 16), "x4": rand(rng, 2, 2, 5, 8)}
    # (onnxruntime's CPU kernel wants heads of a multiple of 16 with rotary.)
    angles8 = np.outer(np.arange(16), 1.0 / 10000 ** (np.arange(8) / 8))
    yield "ms_gqa", ms_model(
        [helper.make_node("GroupQueryAttention",
                          ["q", "k", "v", "", "", "seqlens", "total", "cos",
                           "sin"], ["y", "present_k", "present_v"],
                          name="gqa", domain=ms, num_heads=4, kv_num_heads=2,
                          do_rotary=1)],
        [vi("q", F, [2, 5, 64]), vi("k", F, [2, 5, 32]),
         vi("v", F, [2, 5, 32])],
        [vi("y", F, [2, 5, 64])],
        [init("seqlens", np.array([4, 4], np.int32)),
         init("total", np.array(5, np.int32)),
         init("cos", np.cos(angles8).astype(np.float32)),
         init("sin", np.sin(angles8).astype(np.float32))]), {
            "q": rand(rng, 2, 5, 64), "k": rand(rng, 2, 5, 32),
            "v": rand(rng, 2, 5, 32)}
    # ONNX's own Attention (opset 23; torch.onnx writes it for
    # scaled_dot_product_attention at opset 23): 4-D grouped-query heads
    # with the causal mask, and the 3-D form with heads as attributes.
    yield "attention23", model(
        [helper.make_node("Attention", ["q", "k", "v"], ["y1"],
                          name="gqa_causal", is_causal=1),
         helper.make_node("Attention", ["q3", "k3", "v3"], ["y2"],
                          name="mha_3d", q_num_heads=4, kv_num_heads=2,
                          scale=0.3)],
        [vi("q", F, [2, 4, 5, 8]), vi("k", F, [2, 2, 5, 8]),
         vi("v", F, [2, 2, 5, 6]), vi("q3", F, [2, 5, 32]),
         vi("k3", F, [2, 7, 16]), vi("v3", F, [2, 7, 12])],
        [vi("y1", F, [2, 4, 5, 6]), vi("y2", F, [2, 5, 24])], opset=23), {
            "q": rand(rng, 2, 4, 5, 8), "k": rand(rng, 2, 2, 5, 8),
            "v": rand(rng, 2, 2, 5, 6), "q3": rand(rng, 2, 5, 32),
            "k3": rand(rng, 2, 7, 16), "v3": rand(rng, 2, 7, 12)}
    # Einsum as one batched matmul (batch, free, contracted and summed
    # labels, an output in another order: Mamba2's chunked scan writes
    # "bclhn,bcshn->bclsh"), constant-mode Pad (positive, negative, with
    # axes) and Softplus over both tails.
    yield "einsum_pad_softplus", model(
        [helper.make_node("Einsum", ["a", "b"], ["scan"], name="scan",
                          equation="bclhn,bcshn->bclsh"),
         helper.make_node("Einsum", ["m", "w"], ["mm"], name="mm",
                          equation="ij,jk->ik"),
         helper.make_node("Einsum", ["t", "w"], ["summed"], name="summed",
                          equation="ijq,jk->ki"),
         helper.make_node("Einsum", ["t", "u"], ["outer"], name="outer",
                          equation="ijq,jp->pqi"),
         const("pads", np.array([1, -1, 0, 2], dtype=np.int64)),
         const("half", np.float32(0.5)),
         helper.make_node("Pad", ["m", "pads", "half"], ["padded"],
                          name="pad"),
         const("axis_pads", np.array([2, 1], dtype=np.int64)),
         const("axes", np.array([-1], dtype=np.int64)),
         helper.make_node("Pad", ["t", "axis_pads", "", "axes"],
                          ["padded_axis"], name="pad_axes"),
         const("scale", np.float32(30.0)),
         helper.make_node("Mul", ["x", "scale"], ["wide"], name="widen"),
         helper.make_node("Softplus", ["wide"], ["softplus"],
                          name="softplus")],
        [vi("a", F, [2, 2, 3, 2, 4]), vi("b", F, [2, 2, 3, 2, 4]),
         vi("m", F, [3, 4]), vi("t", F, [3, 4, 2]), vi("u", F, [4, 5]),
         vi("x", F, [4, 5])],
        [vi("scan", F, [2, 2, 3, 3, 2]), vi("mm", F, [3, 5]),
         vi("summed", F, [5, 3]), vi("outer", F, [5, 2, 3]),
         vi("padded", F, [4, 5]), vi("padded_axis", F, [3, 4, 5]),
         vi("softplus", F, [4, 5])],
        [init("w", rand(rng, 4, 5))], opset=18), {
            "a": rand(rng, 2, 2, 3, 2, 4), "b": rand(rng, 2, 2, 3, 2, 4),
            "m": rand(rng, 3, 4), "t": rand(rng, 3, 4, 2),
            "u": rand(rng, 4, 5), "x": rand(rng, 4, 5)}
    # MoE with ORT's fused SwiGLU (what FuseMoe makes of transformers 5's
    # batched experts): GPT-OSS's clamped form with biases, and plain
    # silu(gate) * value. (ORT's CPU kernel fuses interleaved only; the
    # gate-half-first form is checked against PyTorch by the compat rows.)
    def moe_weights(name, experts, rows, cols):
        return init(name, (0.3 * rand(rng, experts, rows, cols)))
    yield "ms_moe_swiglu", ms_model(
        [helper.make_node("MoE", ["x", "logits", "fc1", "b1", "fc2", "b2"],
                          ["y1"], name="moe_gpt_oss", domain=ms, k=2,
                          normalize_routing_weights=1,
                          activation_type="swiglu", swiglu_fusion=1,
                          activation_alpha=1.702, activation_beta=1.0,
                          swiglu_limit=0.5),
         helper.make_node("MoE", ["x", "logits", "fc1", "", "fc2"], ["y2"],
                          name="moe_silu", domain=ms, k=2,
                          normalize_routing_weights=0,
                          activation_type="swiglu", swiglu_fusion=1,
                          activation_alpha=1.0, activation_beta=0.0)],
        [vi("x", F, [6, 8]), vi("logits", F, [6, 4])],
        [vi("y1", F, [6, 8]), vi("y2", F, [6, 8])],
        [moe_weights("fc1", 4, 12, 8), moe_weights("fc2", 4, 8, 6),
         init("b1", 0.1 * rand(rng, 4, 12)), init("b2", 0.1 * rand(rng, 4, 8))]), {
            "x": rand(rng, 6, 8), "logits": rand(rng, 6, 4)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(
        REPO_ROOT, "test", "models", "onnx-ops"))
    parser.add_argument("names", nargs="*",
                        help="only these cases (default: all)")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    rng = np.random.default_rng(0)
    for name, m, feeds in cases(rng):
        if args.names and name not in args.names:
            continue
        if not any(o.domain == "com.microsoft" for o in m.opset_import):
            onnx.checker.check_model(m, full_check=True)
        data = m.SerializeToString()
        with open(os.path.join(args.out, name + ".onnx"), "wb") as f:
            f.write(data)
        session = ort.InferenceSession(data,
                                       providers=["CPUExecutionProvider"])
        outputs = session.run(None, feeds)
        data_dir = os.path.join(args.out, name, "test_data_set_0")
        os.makedirs(data_dir, exist_ok=True)
        graph_inputs = [i.name for i in m.graph.input]
        for i, input_name in enumerate(graph_inputs):
            proto = numpy_helper.from_array(feeds[input_name], input_name)
            with open(os.path.join(data_dir, f"input_{i}.pb"), "wb") as f:
                f.write(proto.SerializeToString())
        for i, (out, value) in enumerate(zip(m.graph.output, outputs)):
            proto = numpy_helper.from_array(value, out.name)
            with open(os.path.join(data_dir, f"output_{i}.pb"), "wb") as f:
                f.write(proto.SerializeToString())
        print(f"wrote {name}")


if __name__ == "__main__":
    main()
