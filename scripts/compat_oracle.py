#!/usr/bin/env python3
"""PyTorch oracle for every row of the compatibility matrix that trains
(issue 55: "every matrix row exported with optimize=False matches
PyTorch's training step and round-trips into PyTorch with strict
load_state_dict").

For each such row (a `-dynamo` row of test/models/compat/manifest.json:
torch.onnx.export(dynamo=True, optimize=False), status ok, not listed in
known-failures.txt or known-failures-training.txt) this script rebuilds
the PyTorch model the row was exported from
(scripts/export_compat_models.py's build(), the same config), loads the
ONNX file's initializers into it by state_dict name, so that the
reference starts from exactly the exported weights (a parameter missing
from the ONNX must be a tied alias of one that is there; any other is an
error for the row), and runs PyTorch's two AdamW steps
(scripts/export_training_oracle.py: reference_steps, HYPER,
configure_optimizer, batch_of_step) on the rows `dtc run --data
oracle-tokens.bin --seed 0` feeds at global batch 4, sequence 8: loss =
F.cross_entropy(logits.view(-1, V), labels.view(-1)), labels the tokens
shifted by one (every row's graph is input_ids -> logits [b, t, V]: dtc's
next-token objective).

Outputs, in test/models/compat/: oracle-tokens.bin (TOKENS uint16 ids <
the rows' vocab) and per row <row>.reference.{json,safetensors}
(export_training_oracle's format, without clipped_grad:, which
test/cli/Inputs/check_oracle.py reads only when dtc's log has no
grad_norm). test/compat/oracle_row.sh trains the row with dtc and compares
(test/compat/train_row.sh runs it when the reference exists).

Regenerate (from the repository root; scripts/export_compat_models.sh
runs it after exporting):

    .venv-bench/bin/python scripts/compat_oracle.py            # every row
    .venv-bench/bin/python scripts/compat_oracle.py llama-dynamo
"""
import argparse
import json
import os
import sys

import numpy as np
import onnx
import torch
from onnx import numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "lib"))
import export_compat_models as compat  # noqa: E402
import export_training_oracle as oracle  # noqa: E402

TOKENS = 200
TOKEN_SEED = 55
TOKENS_FILE = "oracle-tokens.bin"

# Rows not checked against PyTorch, with the reason.
SKIP = {}


def listed(out):
    """{row: reason} of known-failures.txt and known-failures-training.txt."""
    reasons = {}
    for name in ("known-failures.txt", "known-failures-training.txt"):
        path = os.path.join(out, name)
        if not os.path.exists(path):
            continue
        for line in open(path):
            if line.strip() and not line.startswith("#") and ": " in line:
                row, reason = line.rstrip("\n").split(": ", 1)
                reasons.setdefault(row, f"{name}: {reason}")
    return reasons


def plan(out, names):
    """[(row, None)] for the rows to check, [(row name, why not)] for the
    others."""
    with open(os.path.join(out, "manifest.json")) as f:
        manifest = {r["name"]: r for r in json.load(f)["rows"]}
    known = listed(out)
    chosen = []
    for row in compat.select_rows(names):
        entry = manifest.get(row.name, {})
        why = None
        if entry.get("status") != "ok":
            why = f"not exported ({entry.get('status', 'not in manifest')})"
        elif row.exporter != "dynamo":
            why = {"ts": "TorchScript export (no graph signature; "
                         "initializers not all under state_dict names)",
                   "ort": "onnxruntime's optimizer rewrote the graph",
                   "dynamo-opt": "optimize=True: dtc refuses to train it"
                   }[row.exporter]
        elif row.name in known:
            why = known[row.name]
        elif row.name in SKIP:
            why = SKIP[row.name]
        elif not os.path.exists(os.path.join(out, row.name + ".onnx")):
            why = "no .onnx file"
        chosen.append((row, why))
    return chosen, manifest


def load_onnx_weights(model, path):
    """Copies the ONNX file's initializers into `model` by state_dict (and
    buffer) name. Returns (loaded names, problems)."""
    proto = onnx.load(path)      # loads external data, if any, beside it
    inits = {t.name: t for t in proto.graph.initializer}
    targets = dict(model.state_dict(keep_vars=True))
    targets.update(dict(model.named_buffers()))     # non-persistent too
    named = dict(model.named_parameters())
    pkey = {id(p): k for k, p in named.items()}
    loaded, problems = set(), []
    with torch.no_grad():
        for key, t in targets.items():
            if key not in inits:
                continue
            value = torch.from_numpy(numpy_helper.to_array(inits[key]).copy())
            if tuple(value.shape) != tuple(t.shape):
                problems.append(f"{key}: ONNX shape {list(value.shape)}, "
                                f"PyTorch {list(t.shape)}")
                continue
            t.copy_(value.to(t.dtype))
            loaded.add(key)
    # Every parameter must come from the file, under one of its aliases.
    have = {pkey[id(v)] for k, v in targets.items()
            if k in loaded and id(v) in pkey}
    for p in named:
        if p not in have:
            aliases = sorted(k for k, v in model.state_dict(
                keep_vars=True).items() if id(v) == id(named[p]))
            problems.append(f"parameter {' = '.join(aliases)} is not an "
                            f"initializer of {os.path.basename(path)}")
    return loaded, problems


def make_tokens(path, vocab):
    g = torch.Generator().manual_seed(TOKEN_SEED)
    ids = torch.randint(0, vocab, (TOKENS,), generator=g).numpy()
    ids.astype("<u2").tofile(path)
    return ids.astype(np.int64)


def reference(row, tokens, out):
    """Builds the row's model from the ONNX weights and writes its
    reference; returns the info or raises ValueError with the reason."""
    model, _, vocab = compat.build(row)
    path = os.path.join(out, row.name + ".onnx")
    loaded, problems = load_onnx_weights(model, path)
    if problems:
        raise ValueError("; ".join(problems))
    # The ONNX holds the eval-mode graph; training mode must compute the
    # same thing (dropouts are 0) or the row is not PyTorch's step.
    _, x, _ = oracle.batch_of_step(tokens, 1, oracle.BATCH, oracle.SEQ,
                                   oracle.SEED)
    with torch.no_grad():
        ev = model.eval()(x)
        tr = model.train()(x)
    if ev.dim() != 3 or ev.shape[-1] != vocab:
        raise ValueError(f"logits shape {list(ev.shape)}, not [b, t, "
                         f"{vocab}]: not a next-token graph")
    if not torch.allclose(ev, tr, rtol=0, atol=1e-6):
        raise ValueError("train mode differs from the exported eval mode "
                         f"(max {float((ev - tr).abs().max()):.2e})")
    rows = []
    keep = ("param:", "buffer:", "grad:", "step1:", "step2:")
    hyper = oracle.HYPER
    return oracle.reference_steps(
        row.name, model, oracle.token_loss(tokens, rows),
        os.path.join(out, row.name + ".reference"),
        {"row": row.name, "onnx": row.name + ".onnx",
         "initial_weights": f"the {len(loaded)} initializers of "
                            f"{row.name}.onnx, by state_dict name",
         "batch": oracle.BATCH, "seq": oracle.SEQ, "seed": oracle.SEED,
         "vocab": vocab, "tokens_file": TOKENS_FILE, "rows": rows,
         "hyperparameters": hyper,
         "versions": dict(oracle.versions(), transformers=__import__(
             "transformers").__version__)},
        keep=keep)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("names", nargs="*", help="rows or families (default: all)")
    ap.add_argument("--out", default=compat.OUT)
    args = ap.parse_args()
    out = os.path.normpath(args.out)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    chosen, manifest = plan(out, args.names)
    # One token file for every row (a subset regenerated keeps it): ids
    # below the smallest vocab of the rows checked.
    vocab = min(manifest[r.name]["vocab"] for r, why in plan(out, [])[0]
                if not why)
    tokens = make_tokens(os.path.join(out, TOKENS_FILE), vocab)
    errors = 0
    for row, why in chosen:
        prefix = os.path.join(out, row.name + ".reference")
        if why is None:
            try:
                info = reference(row, tokens, out)
                print(f"ok    {row.name}: losses {info['losses'][0]:.6f} "
                      f"{info['losses'][1]:.6f}, {len(info['parameters'])} "
                      f"parameters, tied {len(info['tied'])}", flush=True)
                continue
            except ValueError as e:
                why = f"ERROR {e}"
                errors += 1
        for ext in (".json", ".safetensors"):
            if os.path.exists(prefix + ext):
                os.remove(prefix + ext)
        print(f"skip  {row.name}: {why}", flush=True)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
