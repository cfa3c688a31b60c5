"""Flips one byte in the middle of a checkpoint tensor's first chunk, as a
disk or a copy might, and says where.

usage: flip_byte.py STEP_DIR KEY
"""
import json
import os
import sys

step_dir, key = sys.argv[1], sys.argv[2]
index = json.load(open(os.path.join(step_dir, "index.json")))
chunk = index["tensors"][key]["chunks"][0]
path = os.path.join(step_dir, chunk["file"])
# A chunk's offset is its data's byte offset in the rank file.
at = chunk["offset"] + chunk["bytes"] // 2
with open(path, "r+b") as f:
    f.seek(at)
    byte = f.read(1)[0]
    f.seek(at)
    f.write(bytes([byte ^ 0x40]))
print("flipped byte %d of %s (%s)" % (at, chunk["file"], key))
