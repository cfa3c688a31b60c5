"""Writes, as ONNX text, Mamba's selective scan unrolled over LENGTH
positions the way the dynamo exporter writes transformers' MambaMixer slow
path: per position i a Gather of a and x at i along dim 2, h_i = a_i *
h_{i-1} + x_i from a zero state, the readout h_i @ Unsqueeze(Gather(c, i),
-1), and the readouts Unsqueezed and concatenated along the last dim.
a and x are [1, 2, LENGTH, 2], c [1, LENGTH, 2].

Usage: unrolled_scan.py LENGTH
"""

import sys


def main():
    length = int(sys.argv[1])
    lines = [
        '<ir_version: 8, opset_import: ["" : 17]>',
        f"g (float[1, 2, {length}, 2] a, float[1, 2, {length}, 2] x, "
        f"float[1, {length}, 2] c) => (float[1, 2, {length}] y) {{",
        "  h = Constant<value = float[1, 2, 2] {0, 0, 0, 0}>()",
        "  last = Constant<value = int64[1] {-1}>()",
        "  zero = Constant<value = int64 {0}>()",
    ]
    previous = "h"
    for i in range(length):
        lines += [
            f"  i{i} = Constant<value = int64 {{{i}}}>()",
            f"  a{i} = Gather<axis = 2>(a, i{i})",
            f"  m{i} = Mul(a{i}, {previous})",
            f"  x{i} = Gather<axis = 2>(x, i{i})",
            f"  h{i} = Add(m{i}, x{i})",
            f"  c{i} = Gather<axis = 1>(c, i{i})",
            f"  cu{i} = Unsqueeze(c{i}, last)",
            f"  r{i} = MatMul(h{i}, cu{i})",
            f"  s{i} = Gather<axis = 2>(r{i}, zero)",
            f"  y{i} = Unsqueeze(s{i}, last)",
        ]
        previous = f"h{i}"
    lines.append(f"  y = Concat<axis = -1>({', '.join(f'y{i}' for i in range(length))})")
    lines.append("}")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
