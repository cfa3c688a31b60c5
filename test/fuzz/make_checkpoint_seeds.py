#!/usr/bin/env python3
"""Writes the seeds of fuzz-checkpoint (test/fuzz/corpus/checkpoint/).

  python3 test/fuzz/make_checkpoint_seeds.py OUT_DIR [TP2_STEP_DIR ZERO_STEP_DIR]

A seed is what test/fuzz/FuzzCheckpoint.cpp decodes: a flags byte and
index.json, then each rank file, separated by b"@@DTC@@". The hand-made
seeds follow docs/checkpoints.md (safetensors rank files, index.json with
per-chunk and per-block SHA-256). With the two step directories of real
`dtc run --ckpt-dir` checkpoints (tiny-gpt, tp:2 and dp:2 with --zero 1),
it also writes trimmed copies of them: a few small tensors, their chunks'
bytes and hashes as saved, rank files rebuilt around them.
"""
import hashlib
import json
import os
import struct
import sys

SEP = b"@@DTC@@"
WIDTH = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4,
         "I8": 1, "BOOL": 1}


def safetensors(entries, metadata):
    """entries: [(name, dtype, shape, bytes)] -> (file bytes, {name: offset})."""
    header, offset = {}, 0
    for name, dtype, shape, data in entries:
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    if metadata:
        header["__metadata__"] = metadata
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    out = struct.pack("<Q", len(text)) + text
    offsets = {}
    for name, _, _, data in entries:
        offsets[name] = len(out)
        out += data
    return out, offsets


def sha(data):
    return hashlib.sha256(data).hexdigest()


def seed(flags, index, ranks):
    out = bytes([flags]) + json.dumps(index, indent=1, sort_keys=True).encode()
    for r in ranks:
        out += SEP + r
    assert len(out) < 20000, len(out)
    return out


def count(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def local_shape(shape, dims, flat):
    local = [d // p["parts"] for d, p in zip(shape, dims)]
    if flat["parts"] > 1:
        return [count(local) // flat["parts"]]
    return local


def build(tensors, world, block, step=7, mesh="dp:1"):
    """tensors: {key: (dtype, shape, [(rank, dims, flat, data)])}."""
    per_rank = [[] for _ in range(world)]
    for key, (dtype, shape, chunks) in tensors.items():
        for i, (rank, dims, flat, data) in enumerate(chunks):
            per_rank[rank].append((key, i, dtype, dims, flat, data))
    files, where = [], {}
    for r, items in enumerate(per_rank):
        entries = []
        for key, i, dtype, dims, flat, data in items:
            entries.append((f"{key}@{i}", dtype,
                            local_shape(tensors[key][1], dims, flat), data))
        data, offsets = safetensors(
            entries, {"format": "pt", "dtc.step": str(step), "dtc.rank": str(r)})
        files.append(data)
        where.update({(r, n): o for n, o in offsets.items()})
    index = {"schema": "dtc.checkpoint/1", "step": step, "world_size": world,
             "mesh": mesh, "meta": {"note": "fuzz seed"},
             "hash_block_bytes": block, "tensors": {}}
    for key, (dtype, shape, chunks) in tensors.items():
        out = []
        for i, (rank, dims, flat, data) in enumerate(chunks):
            c = {"file": f"rank-{rank:05d}.safetensors", "name": f"{key}@{i}",
                 "dims": dims, "offset": where[(rank, f"{key}@{i}")],
                 "bytes": len(data), "sha256": sha(data),
                 "block_sha256": [sha(data[a:a + block])
                                  for a in range(0, len(data), block)]}
            if flat["parts"] > 1:
                c["flat"] = flat
            out.append(c)
        index["tensors"][key] = {"shape": shape, "dtype": dtype,
                                 "role": key.split(":")[0] if ":" in key
                                 else "parameter",
                                 "parameter": key.split(":")[-1],
                                 "chunks": out}
    return index, files


def whole(shape):
    return [{"parts": 1, "index": 0, "block": 0} for _ in shape]


def split(shape, dim, parts, index, block=0):
    dims = whole(shape)
    dims[dim] = {"parts": parts, "index": index, "block": block}
    return dims


NOFLAT = {"parts": 1, "index": 0}


def pattern(n, salt):
    return bytes((i * 37 + salt) % 251 for i in range(n))


def handmade(out):
    # Column split over 2 ranks, a row split, an interleaved split, and
    # whole tensors of every dtype (a scalar, an empty one) on rank 0.
    t = {}
    a = pattern(4 * 6 * 4, 1)
    t["w.col"] = ("F32", [4, 6], [
        (0, split([4, 6], 1, 2, 0), NOFLAT,
         b"".join(a[(r * 6 + c) * 4:(r * 6 + c + 1) * 4]
                  for r in range(4) for c in range(3))),
        (1, split([4, 6], 1, 2, 1), NOFLAT,
         b"".join(a[(r * 6 + c) * 4:(r * 6 + c + 1) * 4]
                  for r in range(4) for c in range(3, 6)))])
    b = pattern(6 * 2 * 2, 2)
    t["w.row"] = ("BF16", [6, 2], [
        (0, split([6, 2], 0, 2, 0), NOFLAT, b[:12]),
        (1, split([6, 2], 0, 2, 1), NOFLAT, b[12:])])
    # Interleaved: [8] in runs of 4, each cut in 2 (fused QKV style).
    c = pattern(8 * 4, 3)
    t["qkv.bias"] = ("F32", [8], [
        (0, split([8], 0, 2, 0, 4), NOFLAT, c[0:8] + c[16:24]),
        (1, split([8], 0, 2, 1, 4), NOFLAT, c[8:16] + c[24:32])])
    for dtype, shape in [("F64", []), ("F16", [3]), ("I64", [2]),
                         ("I32", [0]), ("I8", [5]), ("BOOL", [3])]:
        n = count(shape) * WIDTH[dtype]
        t["x." + dtype.lower()] = (dtype, shape,
                                   [(0, whole(shape), NOFLAT, pattern(n, 4))])
    index, files = build(t, 2, 16, mesh="tp:2")
    write(out, "handmade-tp2", seed(0, index, files))
    write(out, "handmade-tp2-root", seed(2, index, files))

    # ZeRO over a tp split on 4 ranks: [4, 4] split over dim 0, each shard
    # flat-split in 2; plus a tensor cut two ways (mixed families).
    t = {}
    d = pattern(16 * 4, 5)
    rows = [d[0:32], d[32:64]]
    t["w.zero"] = ("F32", [4, 4], [
        (2 * s + f, split([4, 4], 0, 2, s), {"parts": 2, "index": f},
         rows[s][16 * f:16 * f + 16]) for s in range(2) for f in range(2)])
    e = pattern(8 * 2, 6)
    t["mixed"] = ("F16", [8], [
        (0, split([8], 0, 2, 0), NOFLAT, e[0:8]),
        (3, whole([8]), {"parts": 2, "index": 1}, e[8:16])])
    index, files = build(t, 4, 8, mesh="tp:2,dp:2")
    write(out, "handmade-zero4", seed(0, index, files))
    # Rehash flag with one chunk's layout changed: index 0 <-> 1 of
    # w.zero's flat parts, so reads go past the hashes into wrong places.
    swapped = json.loads(json.dumps(index))
    for c in swapped["tensors"]["w.zero"]["chunks"][:2]:
        c["flat"]["index"] ^= 1
    write(out, "handmade-zero4-rehash", seed(1, swapped, files))


def trim(step_dir, keys, block=None):
    """The real checkpoint's tensors `keys`, rank files rebuilt."""
    index = json.load(open(os.path.join(step_dir, "index.json")))
    world = index["world_size"]
    raw = [open(os.path.join(step_dir, f"rank-{r:05d}.safetensors"), "rb").read()
           for r in range(world)]
    meta = [json.loads(f[8:8 + struct.unpack("<Q", f[:8])[0]])
            .get("__metadata__", {}) for f in raw]
    entries = [[] for _ in range(world)]
    tensors = {}
    for key in keys:
        t = index["tensors"][key]
        for c in t["chunks"]:
            r = int(c["file"][5:10])
            data = raw[r][c["offset"]:c["offset"] + c["bytes"]]
            assert sha(data) == c["sha256"]
            shape = local_shape(t["shape"], c["dims"],
                                c.get("flat", NOFLAT))
            entries[r].append((c["name"], t["dtype"], shape, data))
        tensors[key] = t
    files, where = [], {}
    for r in range(world):
        data, offsets = safetensors(entries[r], meta[r])
        files.append(data)
        where.update({(r, n): o for n, o in offsets.items()})
    for key, t in tensors.items():
        for c in t["chunks"]:
            c["offset"] = where[(int(c["file"][5:10]), c["name"])]
            if block:
                data = files[int(c["file"][5:10])][c["offset"]:
                                                    c["offset"] + c["bytes"]]
                c["block_sha256"] = [sha(data[a:a + block])
                                     for a in range(0, len(data), block)]
    index["tensors"] = tensors
    if block:
        index["hash_block_bytes"] = block
    return index, files


def write(out, name, data):
    with open(os.path.join(out, name), "wb") as f:
        f.write(data)


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    handmade(out)
    if len(sys.argv) >= 4:
        tp2, zero = sys.argv[2], sys.argv[3]
        keys = ["h.0.attn.c_attn.bias", "h.0.ln_1.weight",
                "exp_avg:h.0.attn.c_proj.bias"]
        write(out, "dtc-tp2", seed(0, *trim(tp2, keys)))
        write(out, "dtc-tp2-block128", seed(0, *trim(tp2, keys, 128)))
        write(out, "dtc-zero1-dp2", seed(2, *trim(zero, keys)))


if __name__ == "__main__":
    main()
