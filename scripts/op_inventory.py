#!/usr/bin/env python3
"""Every op type and attribute form the exporters wrote into the family
fixtures (issue 56, "ops by evidence").

Reads ONNX files (default: test/models/oracle/*.onnx, the models of
scripts/export_training_oracle.py and scripts/export_family_oracle.py,
exported with the newest torch and transformers) and prints, per op type
(domain-qualified outside ai.onnx), how many models and nodes use it, the
attribute forms seen (name=value for ints, floats and strings; name=[...]
for lists, with their lengths; name=<graph> or <tensor> otherwise) and
which models. Every fixture listed imports and trains in
test/cli/train-oracle.test, so every op here is one dtc imports in the
forms shown. Regenerate the committed copy:

    .venv-bench/bin/python scripts/op_inventory.py > docs/op-inventory.txt

Needs the onnx package (.venv-bench has it).
"""
import collections
import glob
import os
import sys

import onnx
from onnx import AttributeProto

ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), ".."))


def attribute_form(attr):
    """A short, stable text of one attribute's value."""
    t = attr.type
    if t == AttributeProto.INT:
        return f"{attr.name}={attr.i}"
    if t == AttributeProto.FLOAT:
        return f"{attr.name}={attr.f:g}"
    if t == AttributeProto.STRING:
        return f"{attr.name}={attr.s.decode(errors='replace')!r}"
    if t == AttributeProto.INTS:
        return f"{attr.name}=[{len(attr.ints)} ints]"
    if t == AttributeProto.FLOATS:
        return f"{attr.name}=[{len(attr.floats)} floats]"
    if t == AttributeProto.TENSOR:
        return f"{attr.name}=<tensor {onnx.TensorProto.DataType.Name(attr.t.data_type)}>"
    if t in (AttributeProto.GRAPH, AttributeProto.GRAPHS):
        return f"{attr.name}=<graph>"
    return f"{attr.name}=<{AttributeProto.AttributeType.Name(t)}>"


def nodes_of(model):
    """The graph's nodes and those of its local functions (the exporter
    writes some decompositions as functions, which dtc inlines)."""
    yield from model.graph.node
    for function in model.functions:
        yield from function.node


def main(paths):
    models = collections.defaultdict(set)
    nodes = collections.Counter()
    forms = collections.defaultdict(collections.Counter)
    for path in paths:
        name = os.path.splitext(os.path.basename(path))[0]
        model = onnx.load(path, load_external_data=False)
        for node in nodes_of(model):
            domain = node.domain if node.domain not in ("", "ai.onnx") else ""
            op = (domain + "::" if domain else "") + node.op_type
            models[op].add(name)
            nodes[op] += 1
            for attr in node.attribute:
                forms[op][attribute_form(attr)] += 1
    print(f"# {len(paths)} models, {len(models)} op types "
          f"(scripts/op_inventory.py)")
    for op in sorted(models):
        print(f"{op}: {len(models[op])} models, {nodes[op]} nodes")
        if forms[op]:
            print("  attributes: " + ", ".join(
                f"{form} ({count})" for form, count in sorted(forms[op].items())))
        print("  models: " + ", ".join(sorted(models[op])))
    return 0


if __name__ == "__main__":
    paths = sys.argv[1:] or sorted(
        p for p in glob.glob(os.path.join(ROOT, "test", "models", "oracle",
                                          "*.onnx"))
        if not p.endswith("-optimized.onnx"))
    sys.exit(main(paths))
