#!/usr/bin/env python3
"""Writes the committed seeds of fuzz-onnx-importer (test/fuzz/corpus/
onnx-importer/) from the ONNX fixtures in test/models: each seed is one
flags byte (see test/fuzz/FuzzOnnxImporter.cpp) and a model whose large
floating-point initializers lost their bytes. The importer drops those bytes
anyway (weights become dtc.parameter ops), so the seed imports as the
fixture does; integer initializers (shape arithmetic, masks) are kept.
Seeds over 64 KB are refused.

usage: make_onnx_seeds.py REPO_ROOT OUT_DIR   (needs the onnx Python package)
"""
import pathlib
import sys

import onnx
from onnx import TensorProto, helper, numpy_helper, printer

root, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
out.mkdir(parents=True, exist_ok=True)
models = root / "test/models"
FLOATS = {TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16,
          TensorProto.DOUBLE}
MAX_SEED = 64 << 10

# Flags byte: bit 0 no-raise, bit 1 batch 3, bit 2 seq-len 5, bit 3 text.
NO_RAISE, BATCH, SEQ, TEXT = 1, 2, 4, 8


def strip(model):
    for init in model.graph.initializer:
        if init.data_type not in FLOATS:
            continue
        size = len(init.raw_data) + 4 * len(init.float_data) + \
            8 * len(init.double_data) + 4 * len(init.int32_data)
        if size > 256:  # scalars and small host tables keep their data
            init.ClearField("raw_data")
            init.ClearField("float_data")
            init.ClearField("double_data")
            init.ClearField("int32_data")
            del init.external_data[:]
            init.data_location = TensorProto.DEFAULT
    # Exporter stack traces: bytes the importer never reads.
    model.ClearField("doc_string")
    model.graph.ClearField("doc_string")
    for node in model.graph.node:
        node.ClearField("doc_string")
    return model


def shorten(model):
    """Renames every value but the graph inputs and outputs to a short name
    and drops node names: exported names make up most of a weightless
    model's bytes, and the importer only reads them in error messages
    (graph input names can matter: "position" ids)."""
    graph = model.graph
    keep = {v.name for v in graph.input} | {v.name for v in graph.output}
    names = {}

    def short(name):
        if not name or name in keep:
            return name
        return names.setdefault(name, f"v{len(names)}")

    for init in graph.initializer:
        init.name = short(init.name)
    for info in graph.value_info:
        info.name = short(info.name)
    for node in graph.node:
        node.ClearField("name")
        for i, name in enumerate(node.input):
            node.input[i] = short(name)
        for i, name in enumerate(node.output):
            node.output[i] = short(name)
    return model


def write(name, flags, payload):
    data = bytes([flags]) + payload
    if len(data) > MAX_SEED:
        sys.exit(f"make_onnx_seeds.py: seed {name} has {len(data)} bytes")
    (out / name).write_bytes(data)


fixtures = sorted(models.glob("*.onnx")) + sorted(models.glob("*/*.onnx"))
for path in fixtures:
    # 868 nodes: tiny-gpt has the same structure in 2 layers.
    if path.name == "tiny-gpt-8l.onnx":
        continue
    rel = path.relative_to(models).with_suffix("")
    name = str(rel).replace("/", "-")
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception:
        # bad/truncated.onnx: keep the first bytes as they are.
        write(name, 0, path.read_bytes()[:4096])
        continue
    strip(model)
    if len(model.SerializeToString()) > MAX_SEED - 1:
        shorten(model)
    payload = model.SerializeToString()
    # The hf models' sequence dim is not deducible: they need --seq-len.
    write(name, SEQ if name.startswith("hf-") else 0, payload)
    if name in ("tiny-gpt", "cnn-cnn", "onnx-ops-attention",
                "onnx-ops-gelu_tanh", "onnx-ops-host_eval"):
        write(name + "-noraise-batch3", NO_RAISE | BATCH, payload)
    if name == "tiny-gpt":
        write(name + "-seq5", SEQ | BATCH, payload)
    if name.startswith("onnx-ops-") or name in ("bad-cycle",
                                                "bad-type-mismatch"):
        # Without node names: the system ONNX's parser predates `[name]`.
        for node in model.graph.node:
            node.ClearField("name")
        write(name + ".txt", TEXT, printer.to_text(model).encode())

# External data read back from the model file itself (the only file in the
# fuzzer's directory): an int64 Reshape shape at the model's first bytes.
shape = numpy_helper.from_array(
    __import__("numpy").array([2, 3], dtype="int64"), "shape")
shape.ClearField("raw_data")
shape.data_location = TensorProto.EXTERNAL
for key, value in (("location", "model.onnx"), ("offset", "0"),
                   ("length", "16")):
    entry = shape.external_data.add()
    entry.key, entry.value = key, value
graph = helper.make_graph(
    [helper.make_node("Reshape", ["x", "shape"], ["y"], name="r")], "g",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, [6])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [shape])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
write("external-self", 0, model.SerializeToString())

# Dictionary: the op types and attribute names the importer reads (from its
# sources), and ONNX's own keywords.
import re  # noqa: E402

onnx_dir = root / "frontends/onnx"
sources = "".join(p.read_text() for p in
                  list(onnx_dir.glob("*.cpp")) + list(onnx_dir.glob("ops/*.cpp")))
words = set(re.findall(r'table\[(?:ms \+ )?"(\w+)"\]', sources))
host = re.search(r"hostOps\(\) \{(.*?)\};", sources, re.S)
words |= set(re.findall(r'"(\w+)"', host.group(1)))
words |= set(re.findall(r'Attr\w*\((?:\*?node|n), "(\w+)"', sources))
words |= {"com.microsoft", "ai.onnx", "location", "offset", "length",
          "model.onnx", "max_position_embeddings", "n_positions",
          "max_seq_len", "position_ids", "input_ids", "batch", "seq",
          "Constant", "value_int", "value_ints", "value_float",
          "value_floats"}
with open(root / "test/fuzz/onnx-importer.dict", "w") as f:
    f.write("# Written by test/fuzz/make_onnx_seeds.py.\n")
    for word in sorted(words):
        f.write(f'"{word}"\n')
