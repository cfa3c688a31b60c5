#!/usr/bin/env python3
"""Writes the committed seeds of fuzz-mlir-parser (test/fuzz/corpus/
mlir-parser/) from the lit tests' .mlir inputs: every `// -----` (and
split-file `//---`) chunk of test/**/*.mlir without its comment lines (RUN,
CHECK, expected-error), behind the selector byte of each FuzzMlirParser.cpp
pipeline that the file's RUN lines use (0, parse and verify only, for files
that run none). Also writes test/fuzz/mlir-parser.dict: the dtc op and
attribute names and the syntax around them.

usage: make_mlir_seeds.py REPO_ROOT OUT_DIR
"""
import hashlib
import pathlib
import re
import sys

root, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
out.mkdir(parents=True, exist_ok=True)

# Selector bytes: indices into kPipelines in FuzzMlirParser.cpp.
PARSE, SIMPLIFY, PROPAGATE, SP_PARTITION, TRAIN_PARTITION, RULES, \
    RECOMPUTE, PARTITION, CANONICALIZE = range(9)


def selectors(text):
    runs = "\n".join(re.findall(r"RUN:(.*)", text))
    found = set()
    if "dtc-simplify" in runs:
        found.add(SIMPLIFY)
    if "dtc-test-sharding-rules" in runs:
        found.add(RULES)
    if "dtc-recompute" in runs:
        found.add(RECOMPUTE)
    if "dtc-autodiff" in runs:
        found.add(TRAIN_PARTITION if "dtc-partition" in runs else RECOMPUTE)
    if "dtc-propagate-sharding" in runs:
        found.add(SP_PARTITION if "dtc-partition" in runs else PROPAGATE)
    if "dtc-partition" in runs and "dtc-propagate-sharding" not in runs:
        found.add(PARTITION)
    if not found:
        found = {PARSE, CANONICALIZE}
    return sorted(found)


count = 0
for path in sorted(root.glob("test/**/*.mlir")):
    text = path.read_text()
    chunks = re.split(r"^// -----.*$|^//--- .*$", text, flags=re.M)
    for chunk in chunks:
        lines = [l for l in chunk.splitlines()
                 if not l.lstrip().startswith("//") and l.strip()]
        body = "\n".join(lines) + "\n"
        if not lines or len(body) > 16 << 10:
            continue
        for selector in selectors(text):
            data = bytes([selector]) + body.encode()
            name = f"{path.stem}-{hashlib.sha1(data).hexdigest()[:10]}"
            (out / name).write_bytes(data)
            count += 1

# Dictionary: op mnemonics and attribute/type syntax from the dialect .td.
words = set()
for td in (root / "dialects/dtc").glob("*.td"):
    src = td.read_text()
    words |= {"dtc." + m for m in re.findall(
        r'def \w+ : Dtc_\w*Op<"([a-z_.]+)"', src)}
    words |= set(re.findall(r'\b(?:I64Attr|F64Attr|UnitAttr|BoolAttr|'
                            r'DenseI64ArrayAttr|StrAttr|I64ArrayAttr)\s*:\s*'
                            r'\$(\w+)', src))
words |= {"func.func", "func.return", "func.call", "module", "tensor<",
          "xf32>", "xbf16>", "xf16>", "xi64>", "xi1>", "f32", "i64",
          "#dtc.sharding<", "#dtc.async<", "dtc.sharding", "dtc.mesh",
          "dtc.shard", "dtc.global_type", "dtc.name", "dtc.loss",
          "dtc.grad_of", "dtc.grad_of_arg", "array<i64: ", "dense<",
          "partial = ", "\"dp\"", "\"tp\"", "\"sp\"", "-> ", " : ", "%arg0",
          "{{", "}}", "[[", "]]", "causal", "scale", "unit", "true", "false",
          "0x7FF0000000000000", "9223372036854775807", "-1"}
with open(root / "test/fuzz/mlir-parser.dict", "w") as f:
    f.write("# Written by test/fuzz/make_mlir_seeds.py.\n")
    for word in sorted(words):
        f.write('"' + word.replace("\\", "\\\\").replace('"', '\\"') + '"\n')
print(f"{count} seeds, {len(words)} dictionary entries")
