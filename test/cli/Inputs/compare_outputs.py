"""Compares float32 tensors of two ONNX test-data folders (output_N.pb,
TensorProto with raw_data, read by hand: no onnx package needed): same
shapes, elements within ATOL + RTOL * |expected|.

usage: compare_outputs.py EXPECTED_DIR GOT_DIR ATOL RTOL
"""
import glob
import os
import sys

import numpy as np


def varint(buf, at):
    value = shift = 0
    while True:
        byte = buf[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, at


def read_tensor(path):
    buf = open(path, "rb").read()
    dims, raw, floats, at = [], b"", [], 0
    while at < len(buf):
        key, at = varint(buf, at)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, at = varint(buf, at)
            if field == 1:
                dims.append(value)
        elif wire == 2:
            size, at = varint(buf, at)
            chunk = buf[at:at + size]
            at += size
            if field == 1:  # packed dims
                pos = 0
                while pos < len(chunk):
                    value, pos = varint(chunk, pos)
                    dims.append(value)
            elif field == 9:
                raw = chunk
            elif field == 4:
                floats = np.frombuffer(chunk, "<f4")
        elif wire == 5:
            at += 4
        elif wire == 1:
            at += 8
    data = np.frombuffer(raw, "<f4") if raw else np.asarray(floats, "<f4")
    return data.reshape(dims)


expected_dir, got_dir, atol, rtol = sys.argv[1], sys.argv[2], \
    float(sys.argv[3]), float(sys.argv[4])
failed = 0
for path in sorted(glob.glob(os.path.join(expected_dir, "output_*.pb"))):
    name = os.path.basename(path)
    want = read_tensor(path)
    got = read_tensor(os.path.join(got_dir, name))
    if got.shape != want.shape:
        print("FAIL %s: shape %s, expected %s" % (name, got.shape, want.shape))
        failed += 1
        continue
    err = np.abs(got - want) - rtol * np.abs(want)
    ok = bool((err <= atol).all())
    failed += not ok
    print("%s %s %s: max |got - expected| %.1e" %
          ("ok" if ok else "FAIL", name, list(want.shape),
           float(np.abs(got - want).max())))
sys.exit(1 if failed else 0)
