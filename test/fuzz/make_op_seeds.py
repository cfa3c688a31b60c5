#!/usr/bin/env python3
"""Writes fuzz seeds for fuzz-program-loader: one tiny program.pb per CPU
kernel, input/output count, dtype and shape, so the fuzzer starts inside
every kernel instead of having to discover op names byte by byte. Each
seed states the scalar attributes kernels require (programs write out every
default, so a kernel refuses an instruction without them): with none the
fuzzer would stop at the attribute check of most kernels.

usage: make_op_seeds.py REPO_ROOT OUT_DIR   (needs protoc)
"""
import pathlib
import re
import subprocess
import sys

root, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
out.mkdir(parents=True, exist_ok=True)
ops = sorted({m for f in (root / "runtime/cpu").glob("*.cpp")
              for m in re.findall(r'registry\.add\("([\w.]+)"', f.read_text())})
shapes = {"m": "shape: 2 shape: 3", "s": "", "v": "shape: 6",
          "z": "shape: 0 shape: 3", "r4": "shape: 1 shape: 2 shape: 1 shape: 3"}
# The scalar attributes the kernels read as required, at values programs
# use; a kernel ignores those it does not read.
attrs = " ".join(
    f'attrs {{ key: "{key}" value {{ {value} }} }}'
    for key, value in [("axis", "i: -1"), ("epsilon", "f: 1e-05"),
                       ("scale", "f: 0.5"), ("ignore_index", "i: -100"),
                       ("top_k", "i: 1"), ("capacity", "i: 2"),
                       ("seq_len", "i: 2"), ("beta1", "f: 0.9"),
                       ("beta2", "f: 0.999"), ("weight_decay", "f: 0.01")])
arities = [(0, 0), (1, 1), (2, 1), (3, 1), (1, 2), (3, 3), (5, 4)]
for op in ops:
    for inputs, outputs in arities:
        for dtype in ("F32", "I64", "BF16"):
            for shape_name, shape in shapes.items():
                values = " ".join(
                    f"values {{ id: {i} type {{ dtype: {dtype} {shape} }} "
                    f"arena_offset: {64 * i} }}"
                    for i in range(inputs + outputs))
                operands = " ".join(
                    [f"inputs: {i}" for i in range(inputs)] +
                    [f"outputs: {inputs + i}" for i in range(outputs)])
                text = (f'schema: "dtc.program/1" ranks {{ functions {{ '
                        f'name: "f" arena_bytes: {64 * (inputs + outputs + 1)} '
                        f'{values} instructions {{ op: "{op}" {operands} {attrs} }} '
                        f'}} }}')
                encoded = subprocess.run(
                    ["protoc", f"-I{root}", "--encode=dtc.program.Program",
                     "runtime/proto/program.proto"],
                    input=text.encode(), capture_output=True, check=True,
                    cwd=root).stdout
                name = f"{op}-{inputs}-{outputs}-{dtype}-{shape_name}.pb"
                (out / name).write_bytes(encoded)
