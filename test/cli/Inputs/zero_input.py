"""Writes a float32 TensorProto of zeros (serialized by hand, no onnx
package needed): zero_input.py PATH NAME DIM [DIM ...]"""
import sys


def varint(n):
    out = b""
    while True:
        low, n = n & 0x7F, n >> 7
        out += bytes([low | (0x80 if n else 0)])
        if not n:
            return out


path, name, dims = sys.argv[1], sys.argv[2], [int(d) for d in sys.argv[3:]]
count = 1
msg = b""
for d in dims:
    msg += b"\x08" + varint(d)  # dims
    count *= d
msg += b"\x10" + varint(1)  # data_type FLOAT
raw = b"\x00" * (4 * count)
msg += b"\x4a" + varint(len(raw)) + raw  # raw_data
msg += b"\x42" + varint(len(name)) + name.encode()  # name
open(path, "wb").write(msg)
