"""Derives every rank's chunk from a bundle's layout.json (dtc.layout/2).

An independent reading of the placement rule SPEC and docs/checkpoints.md
state, for tests: rank r sits at the row-major coordinates of r over the
mesh (outermost axis first); a dim split over mesh axes is cut into one
part per member of r's group on those axes, the group ordered row-major
over its axes in mesh order; with an interleave block B every run of B
elements is cut instead of the whole dim; ZeRO's flat axes then cut the
flattened shard into equal contiguous parts the same way.

  layout_chunks.py facts LAYOUT         the facts layout-json.test checks
  layout_chunks.py match LAYOUT INDEX   whether the distinct chunks the rule
                                        gives are exactly a checkpoint
                                        index.json's chunks
"""
import json
import sys


def parse_mesh(text):
    axes = []
    for item in filter(None, text.split(",")):
        name, size = item.split(":")
        axes.append((name, int(size)))
    return axes


def parse_ranks(text):
    ranks = []
    for item in text.split(","):
        lo, _, hi = item.partition("-")
        ranks.extend(range(int(lo), int(hi or lo) + 1))
    return ranks


def coordinates(mesh, rank):
    coords = []
    for _, size in reversed(mesh):
        coords.append(rank % size)
        rank //= size
    return coords[::-1]


def part_of(mesh, rank, axes):
    """(parts, index) of rank in its group over `axes`."""
    coords = coordinates(mesh, rank)
    parts, index = 1, 0
    for i, (name, size) in enumerate(mesh):
        if name in axes:
            parts *= size
            index = index * size + coords[i]
    return parts, index


def chunk(mesh, tensor, placement, rank):
    """((parts, index, block) per dim, (flat parts, flat index))."""
    shape = tensor["shape"]
    dims = placement.get("dims") or [{"axes": [], "block": 0}] * len(shape)
    cut = tuple(part_of(mesh, rank, d["axes"]) + (d["block"],) for d in dims)
    flat = part_of(mesh, rank, placement.get("flat_axes", []))
    return cut, flat


def chunks(layout):
    """name -> [(rank, chunk)] for every rank holding the tensor."""
    mesh = parse_mesh(layout["mesh"])
    out = {}
    for name, tensor in layout["tensors"].items():
        held = []
        for placement in tensor["placements"]:
            for rank in parse_ranks(placement["ranks"]):
                held.append((rank, chunk(mesh, tensor, placement, rank)))
        out[name] = sorted(held)
    return out


def facts(layout):
    t = layout["tensors"]
    held = chunks(layout)
    print(layout["schema"], layout["mesh"], len(t), "variables")

    def box(name, rank, c):
        shape = t[name]["shape"]
        sizes = [n // parts for n, (parts, _, _) in zip(shape, c[0])]
        offsets = [index * s for (_, index, _), s in zip(c[0], sizes)]
        return f"{rank} {offsets}+{sizes}"

    def listed(name, describe):
        seen, words = set(), []
        for rank, c in held[name]:
            words.append(describe(name, rank, c) +
                         (" replica" if c in seen else ""))
            seen.add(c)
        return " ".join(words)

    print("onnx::MatMul_283", t["onnx::MatMul_283"]["shape"],
          t["onnx::MatMul_283"]["role"] + ":", listed("onnx::MatMul_283", box))
    print("exp_avg:onnx::MatMul_283 flat:", " ".join(
        f"{rank} {c[1][1]}/{c[1][0]}"
        for rank, c in held["exp_avg:onnx::MatMul_283"]))
    print("onnx::MatMul_278 blocks:", " ".join(
        f"{rank} {c[0][1][2]}:{c[0][1][1]}/{c[0][1][0]}"
        for rank, c in held["onnx::MatMul_278"][:2]))


def index_chunks(index):
    """checkpoint key -> set of chunks, as index.json records them."""
    out = {}
    for key, tensor in index["tensors"].items():
        got = set()
        for c in tensor["chunks"]:
            dims = tuple((d["parts"], d["index"], d["block"]) for d in c["dims"])
            flat = c.get("flat", {"parts": 1, "index": 0})
            got.add((dims, (flat["parts"], flat["index"])))
        out[key] = got
    return out


def match(layout, index):
    expected = {}
    for name, held in chunks(layout).items():
        tensor = layout["tensors"][name]
        if tensor["role"] == "grad":  # accumulators are not saved
            continue
        key = (tensor["parameter"] if tensor["role"] == "parameter"
               else tensor["role"] + ":" + tensor["parameter"])
        expected.setdefault(key, set()).update(c for _, c in held)
    saved = index_chunks(index)
    wrong = sorted(k for k in set(expected) | set(saved)
                   if expected.get(k) != saved.get(k))
    for key in wrong[:5]:
        print("differs:", key, "rule", sorted(expected.get(key, [])),
              "checkpoint", sorted(saved.get(key, [])))
    total = sum(len(c) for c in saved.values())
    print(f"{len(saved)} tensors, {total} chunks:",
          "rule and checkpoint agree" if not wrong else
          f"{len(wrong)} tensors differ")


if __name__ == "__main__":
    mode = sys.argv[1]
    layout = json.load(open(sys.argv[2]))
    if mode == "facts":
        facts(layout)
    else:
        match(layout, json.load(open(sys.argv[3])))
