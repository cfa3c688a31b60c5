#!/usr/bin/env python3
"""Turns a CUDA source into C++ for the host emulation (include/Emulator.h).

Two rewrites, everything else is left to the emulation's headers:

    kernel<<<grid, block, shared, stream>>>(args)
        -> ::emu::launch(grid, block, shared, stream, [&] { kernel(args); })
    extern __shared__ T name[];
        -> T *name = static_cast<T *>(::emu::dynamicShared());

Line numbers are kept, so compiler errors and failures point into the .cu
file.

Usage: rewrite_launches.py INPUT.cu OUTPUT.cpp
"""

import re
import sys

# The kernel, plain or with template arguments, up to the launch's "(".
LAUNCH = re.compile(r"([A-Za-z_][\w:]*(?:<[^<>;()]*>)?)\s*<<<(.*?)>>>\s*\(",
                    re.DOTALL)
DYNAMIC_SHARED = re.compile(r"extern\s+__shared__\s+(\w+)\s+(\w+)\[\];")


def split_arguments(text):
    """Splits `text` at the commas outside brackets."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        if char in "([{<":
            depth += 1
        elif char in ")]}>":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    parts.append(text[start:].strip())
    return parts


def closing_parenthesis(text, open_index):
    depth = 0
    for i in range(open_index, len(text)):
        if text[i] == "(":
            depth += 1
        elif text[i] == ")":
            depth -= 1
            if depth == 0:
                return i
    sys.exit("rewrite_launches.py: a kernel launch's arguments never close")


def rewrite(source):
    out, pos = [], 0
    while match := LAUNCH.search(source, pos):
        kernel = match.group(1)
        config = split_arguments(match.group(2))
        grid, block = config[:2]
        shared = config[2] if len(config) > 2 else "0"
        stream = config[3] if len(config) > 3 else "nullptr"
        end = closing_parenthesis(source, match.end() - 1)
        arguments = source[match.end():end]
        # The newlines of the launch configuration, to keep line numbers.
        newlines = "\n" * match.group(0).count("\n")
        out += [source[pos:match.start()],
                f"::emu::launch({grid}, {block}, {shared}, {stream},{newlines} "
                f"[&] {{ {kernel}({arguments}); }})"]
        pos = end + 1
    out.append(source[pos:])
    return DYNAMIC_SHARED.sub(
        r"\1 *\2 = static_cast<\1 *>(::emu::dynamicShared());", "".join(out))


def main():
    input_path, output_path = sys.argv[1:]
    with open(input_path) as f:
        source = f.read()
    with open(output_path, "w") as f:
        f.write(f'#line 1 "{input_path}"\n{rewrite(source)}')


if __name__ == "__main__":
    main()
