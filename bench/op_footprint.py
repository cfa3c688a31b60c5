#!/usr/bin/env python3
"""How many source files must change when an op changes (issue 33's bars:
matmul <= 6, softmax <= 6, attention <= 10).

A file counts when its code, outside comments and ODS documentation (//
lines, `let summary` and `let description`), names the op: its C++ class
(MatmulOp), its name ("dtc.matmul"; the bare "matmul" only as an ODS
mnemonic, in .td files: elsewhere it is some other string, a cluster-file
key or a router's score function), or a kernel function the runtimes
register for it (registry.add("dtc.matmul", matmulKernel)). The bars hold
for the op's family (issue 62: counted by what computes the op): the op
and the dialect's ops that compute it in another form, its gradient and
the pieces a lowering splits it into (attention_grad, attention_block,
attention_block_grad, attention_merge; softmax_grad); `code` is the op's
own name alone.
The broad count of earlier notes (any case-insensitive mention, comments
and unrelated words such as "flash attention" included) is printed beside
it. Usage: bench/op_footprint.py [op ...]   (default: the three of the bars)
"""

import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
DIRS = ("dialects", "passes", "compiler", "runtime")
SUFFIXES = (".cpp", ".h", ".td", ".cu")
BARS = {"matmul": 6, "softmax": 6, "attention": 10}


def sources():
    for top in DIRS:
        for path in sorted((ROOT / top).rglob("*")):
            if path.suffix in SUFFIXES and path.is_file():
                yield path


def strip_comments(text):
    # Line comments: string literals holding "//" do not occur in the names
    # counted here. ODS documentation: what an op's summary or description
    # mentions does not change with it.
    text = re.sub(r"//[^\n]*", "", text)
    text = re.sub(r"let\s+description\s*=\s*\[\{.*?\}\];", "", text,
                  flags=re.S)
    return re.sub(r'let\s+summary\s*=\s*"(?:[^"\\]|\\.)*"(?:\s*"(?:[^"\\]|\\.)*")*;',
                  "", text)


def class_name(op):
    return "".join(part.capitalize() for part in op.split("_")) + "Op"


def kernel_functions(op, texts):
    names = set()
    pattern = re.compile(r'\.add\(\s*"dtc\.%s"\s*,\s*&?(\w+)' % re.escape(op))
    for code in texts.values():
        names.update(pattern.findall(code))
    return names


def family(op, texts):
    """The op and the dialect's ops that compute it in another form: its
    gradient and the pieces a lowering splits it into (attention_grad,
    attention_block, attention_merge, ...), found by mnemonic in the .td
    files."""
    members = {op}
    pattern = re.compile(r'<"(%s_[a-z_]+)"' % re.escape(op))
    for p, code in texts.items():
        if p.suffix == ".td":
            members.update(pattern.findall(code))
    return sorted(members)


def files_naming(op, texts):
    kernels = kernel_functions(op, texts)
    words = [r"\b%s\b" % class_name(op), r"\bdtc\.%s\b" % op]
    words += [r"\b%s\b" % re.escape(k) for k in sorted(kernels)]
    named = re.compile("|".join(words))
    mnemonic = re.compile(r'"%s"' % op)
    return {p for p, code in texts.items()
            if named.search(code)
            or (p.suffix == ".td" and mnemonic.search(code))}


def main(ops):
    texts = {p: strip_comments(p.read_text(errors="replace")) for p in sources()}
    raw = {p: p.read_text(errors="replace") for p in texts}
    print("%-12s %6s %6s %6s %4s  %s" % ("op", "code", "family", "broad",
                                          "bar", "files of the family"))
    over = False
    for op in ops:
        own = files_naming(op, texts)
        members = family(op, texts)
        files = set()
        for member in members:
            files |= files_naming(member, texts)
        files = sorted(files, key=lambda p: str(p))
        broad = sum(1 for text in raw.values() if re.search(op, text, re.I))
        bar = BARS.get(op)
        # The bar holds the family: what computes the op in any of its forms.
        over |= bar is not None and len(files) > bar
        rel = " ".join(str(p.relative_to(ROOT)) for p in files)
        print("%-12s %6d %6d %6d %4s  %s" % (op, len(own), len(files), broad,
                                             bar or "-", rel))
        if len(members) > 1:
            print("%-12s   (family: %s)" % ("", ", ".join(members)))
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or list(BARS)))
