"""Writes safetensors training shards (dtc run --data DIR) with numpy.

usage:
  make_shards.py images DIR ROWS SHARDS SEED
      a classifier's samples for test/models/cnn: `image` f32 [3, 16, 16]
      (the graph input's name; its class's per-channel mean plus N(0, 1)
      noise, so that it can be learned) and `labels` i64 in [0, 10).
  make_shards.py tokens DIR ROWS SHARDS SEQ VOCAB SEED [NAME]
      a token model's samples: windows of a phrase stream as `NAME`
      (default: `tokens`, the role) i32 [SEQ] and `labels` i64 [SEQ], the
      window shifted by one.
  make_shards.py window FILE DIR SEQ VOCAB SEED
      one window of SEQ + 1 random ids twice: as a token file FILE of
      exactly SEQ + 1 uint16 ids (its only window) and as a one-row shard
      in DIR (tokens = ids[:SEQ], labels = ids[1:]). Every sample of both
      is that window, so a run on either must compute the same losses.
  make_shards.py bad DIR KIND SEQ
      shards dtc must refuse: KIND shape (tokens of SEQ / 2 ids), dtype
      (labels f32), missing (labels only).
"""
import os
import sys

import numpy as np
from safetensors.numpy import save_file


def split(out, tensors, shards):
    """Writes `tensors` (same row count) as `shards` files, rows in order."""
    os.makedirs(out, exist_ok=True)
    rows = next(iter(tensors.values())).shape[0]
    bounds = np.linspace(0, rows, shards + 1).astype(int)
    for i in range(shards):
        part = {k: np.ascontiguousarray(v[bounds[i]:bounds[i + 1]])
                for k, v in tensors.items()}
        save_file(part, os.path.join(out, "part-%05d.safetensors" % i))


def phrases(count, vocab, rng):
    stream = []
    table = [rng.integers(0, vocab, rng.integers(3, 9)) for _ in range(40)]
    while len(stream) < count:
        stream.extend(table[rng.integers(0, 40)])
    return np.array(stream[:count], dtype=np.int64)


def main(argv):
    kind = argv[1]
    if kind == "images":
        out, rows, shards, seed = argv[2], int(argv[3]), int(argv[4]), \
            int(argv[5])
        rng = np.random.default_rng(seed)
        means = rng.standard_normal((10, 3)).astype(np.float32)
        labels = rng.integers(0, 10, rows).astype(np.int64)
        image = (means[labels][:, :, None, None] +
                 rng.standard_normal((rows, 3, 16, 16))).astype(np.float32)
        split(out, {"image": image, "labels": labels}, shards)
    elif kind == "tokens":
        out, rows, shards, seq, vocab, seed = argv[2], int(argv[3]), \
            int(argv[4]), int(argv[5]), int(argv[6]), int(argv[7])
        name = argv[8] if len(argv) > 8 else "tokens"
        rng = np.random.default_rng(seed)
        stream = phrases(rows * (seq + 1), vocab, rng)
        windows = stream.reshape(rows, seq + 1)
        split(out, {name: windows[:, :seq].astype(np.int32),
                    "labels": windows[:, 1:].astype(np.int64)}, shards)
    elif kind == "window":
        path, out, seq, vocab, seed = argv[2], argv[3], int(argv[4]), \
            int(argv[5]), int(argv[6])
        ids = np.random.default_rng(seed).integers(0, vocab, seq + 1)
        ids.astype("<u2").tofile(path)
        split(out, {"tokens": ids[None, :seq].astype(np.int64),
                    "labels": ids[None, 1:].astype(np.int64)}, 1)
    elif kind == "bad":
        out, what, seq = argv[2], argv[3], int(argv[4])
        ids = np.zeros((4, seq), dtype=np.int64)
        if what == "shape":
            tensors = {"tokens": ids[:, :seq // 2].copy(), "labels": ids}
        elif what == "dtype":
            tensors = {"tokens": ids, "labels": ids.astype(np.float32)}
        elif what == "missing":
            tensors = {"labels": ids}
        else:
            raise SystemExit("unknown bad kind " + what)
        split(out, tensors, 1)
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
