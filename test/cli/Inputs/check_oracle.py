#!/usr/bin/env python3
"""Compares a dtc training run with PyTorch's own training step (issue 55).

    check_oracle.py REFERENCE_PREFIX CKPT LOG_JSON [--steps N]
                    [--consolidated FILE]

REFERENCE_PREFIX names `<prefix>.json` and `<prefix>.safetensors`, written
by scripts/export_training_oracle.py (PyTorch's losses, raw step-1
gradients, parameters after steps 1 and 2, buffers, state_dict keys). CKPT
is dtc's checkpoint root (`--ckpt-dir` of a run with `--save-every 1`,
holding step-00000001 ... ) or one step directory (then only that step's
tensors are checked). LOG_JSON is `dtc run --log-json`'s output. --steps N
(1 or 2, default 2): the steps to check. --consolidated FILE: `dtc ckpt
consolidate` of step N.

Checks (one line each, "ok ..." or "FAIL ..."; exit 1 on any failure):

  trained set   every tensor dtc trains (has exp_avg: moments) is a
                PyTorch parameter, under a state_dict key ("dtc trained
                buffer X" otherwise), and every PyTorch parameter is
                trained, once (a tied pair is one parameter); buffers and
                parameters with requires_grad=False (the reference's
                "frozen") and those the loss does not reach ("unreached":
                no gradient, so AdamW skips them) keep their values
  loss          each step's loss: relative error <= 1e-5
  grad_norm     each step's global gradient norm (before clipping):
                relative error <= 1e-4
  grads         step 1: dtc's exp_avg after step 1 is (1 - beta1) times
                the clipped averaged gradient (the clip factor min(1,
                clip / (norm + 1e-6)) is folded into AdamW's gradient,
                docs/training.md), so the raw gradient is exp_avg /
                (1 - beta1) / clip(dtc's logged grad_norm); per parameter
                ||g_dtc - g_torch|| / ||g_torch|| <= 1e-4
  params        after each step, per parameter
                ||p_dtc - p_torch|| / ||p_torch - p_torch_before|| <= 1e-2
                (relative to the step's own update, as dtc verify)
  roundoff      an element whose PyTorch step-1 gradient is at rounding
                level (below 1e-4 of the model's per-element RMS gradient,
                as dtc verify's floor: a key bias before softmax, or the
                part of one outside a partial rotary, has gradient 0 in
                exact arithmetic) has no direction to compare: dtc's
                gradient there must be within the floor of PyTorch's, at
                that level too, and AdamW, which
                turns any nonzero gradient into a step of up to about lr,
                moves it by no more than 4 * lr * steps from PyTorch's
                value; the tensor's other elements are compared as above
  consolidated  its keys are PyTorch's state_dict keys (what
                load_state_dict(strict=True) needs: tied aliases and
                persistent buffers included; a tied alias tie_weights()
                restores, or an unreached parameter the exporter dropped
                (the reference's "not_exported"), may be missing and is
                named), shapes equal, parameters within the update
                tolerance, buffers exact

Needs numpy and safetensors (the project venv); no torch.
"""
import argparse
import json
import math
import os
import sys

import numpy as np
from safetensors import safe_open

ROUNDOFF_FLOOR = 1e-4   # of the model's per-element RMS gradient
LOSS_TOL = 1e-5
NORM_TOL = 1e-4
GRAD_TOL = 1e-4
PARAM_TOL = 1e-2


class Report:
    def __init__(self):
        self.checks = 0
        self.failed = 0

    def ok(self, text):
        self.checks += 1
        print("ok " + text)

    def fail(self, text):
        self.checks += 1
        self.failed += 1
        print("FAIL " + text)

    def check(self, good, text):
        (self.ok if good else self.fail)(text)


def load_safetensors(path):
    out = {}
    with safe_open(path, "np") as f:
        for key in f.keys():
            out[key] = f.get_tensor(key)
    return out


def dim_indices(size, part):
    """The global indices along one dim of size `size` that a chunk with
    {"parts", "index", "block"} holds (runtime/core/Shard.h)."""
    parts, index = part["parts"], part["index"]
    block = part.get("block", 0) or size
    piece = block // parts
    runs = size // block
    return np.concatenate([np.arange(r * block + index * piece,
                                     r * block + (index + 1) * piece)
                           for r in range(runs)])


class Checkpoint:
    """One committed step directory of dtc's checkpoint, read whole."""

    def __init__(self, step_dir):
        self.dir = step_dir
        with open(os.path.join(step_dir, "index.json")) as f:
            self.index = json.load(f)
        self.tensors = self.index["tensors"]
        self._files = {}

    def _raw(self, file, name):
        if file not in self._files:
            self._files[file] = safe_open(os.path.join(self.dir, file), "np")
        return self._files[file].get_tensor(name)

    def read(self, key):
        """The whole tensor `key`, assembled from its chunks (dims cut, then
        ZeRO's flat split of the cut shard)."""
        info = self.tensors[key]
        shape = tuple(info["shape"])
        whole = np.full(shape, np.nan, dtype=np.float64)
        groups = {}
        for chunk in info["chunks"]:
            dims = chunk.get("dims") or [{"parts": 1, "index": 0,
                                          "block": 0}] * len(shape)
            groups.setdefault(json.dumps(dims, sort_keys=True),
                              (dims, []))[1].append(chunk)
        for dims, chunks in groups.values():
            idx = [dim_indices(s, d) for s, d in zip(shape, dims)]
            local = tuple(len(i) for i in idx)
            flat = np.full(int(np.prod(local, dtype=np.int64)), np.nan)
            for chunk in chunks:
                data = self._raw(chunk["file"], chunk["name"]).reshape(-1)
                fl = chunk.get("flat", {"parts": 1, "index": 0})
                n = flat.size // fl["parts"]
                flat[fl["index"] * n:(fl["index"] + 1) * n] = data
            part = flat.reshape(local)
            if shape:
                whole[np.ix_(*idx)] = part
            else:
                whole = part
        return whole


def rel(a, b, denom):
    d = float(np.linalg.norm((np.asarray(a, np.float64)
                              - np.asarray(b, np.float64)).ravel()))
    return d / max(denom, 1e-30) if denom > 0 else (0.0 if d == 0 else
                                                      math.inf)


def norm(a):
    return float(np.linalg.norm(np.asarray(a, np.float64).ravel()))


def read_log(path):
    steps = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line.startswith("{"):
                continue
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            if "step" in obj and "loss" in obj:
                steps[int(obj["step"])] = obj
    return steps


def step_dirs(ckpt, steps):
    """{step: directory} to check."""
    own = os.path.join(ckpt, "index.json")
    if os.path.exists(own):
        with open(own) as f:
            return {int(json.load(f)["step"]): ckpt}
    found = {}
    for s in range(1, steps + 1):
        d = os.path.join(ckpt, "step-%08d" % s)
        if os.path.isdir(d):
            found[s] = d
    return found


def roundoff_note(dtc_name, at_roundoff, noisy):
    names = sorted(k for p, k in dtc_name.items() if p in at_roundoff)
    partly = sorted(k for p, k in dtc_name.items()
                    if p not in at_roundoff and noisy[p].any())
    note = ""
    if names:
        note += (f"; {len(names)} at rounding level ("
                 f"{', '.join(names[:3])}{', ...' if len(names) > 3 else ''})")
    if partly:
        note += (f"; {len(partly)} partly ("
                 f"{', '.join(partly[:3])}{', ...' if len(partly) > 3 else ''})")
    return note


def worst_line(kind, results, tol):
    name, value = max(results, key=lambda r: r[1])
    return (f"{kind}: {len(results)} parameters, worst {value:.2e} in "
            f"'{name}' (tolerance {tol:.0e})")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("reference")
    ap.add_argument("ckpt")
    ap.add_argument("log")
    ap.add_argument("--steps", type=int, default=2, choices=(1, 2))
    ap.add_argument("--consolidated")
    args = ap.parse_args()

    with open(args.reference + ".json") as f:
        ref = json.load(f)
    tensors = load_safetensors(args.reference + ".safetensors")
    beta1 = ref["hyperparameters"]["betas"][0]
    clip_at = ref["hyperparameters"]["grad_clip"]
    buffers = set(ref["buffers"])
    # Parameters with requires_grad=False: PyTorch never updates them, so,
    # like buffers, they must come out as they went in.
    frozen = set(ref.get("frozen", []))
    # Parameters the loss does not reach: no gradient, so AdamW neither
    # moves nor decays them; they too must come out as they went in.
    unreached = set(ref.get("unreached", []))
    parameters = [p for p in ref["parameters"]   # deduplicated torch names
                  if p not in unreached]
    fixed = {k: tensors["buffer:" + k] for k in buffers}
    fixed.update({k: tensors["frozen:" + k] for k in frozen})
    for k, p in ref["parameter_of_key"].items():
        if p in unreached:
            fixed[k] = tensors["param:" + p]
    lr = ref["hyperparameters"]["lr"]
    # Parameters whose gradient is rounding noise (see "roundoff" above).
    grads = {p: tensors["grad:" + p] for p in parameters}
    model_rms = math.sqrt(sum(float(np.sum(g.astype(np.float64) ** 2))
                              for g in grads.values())
                          / max(1, sum(g.size for g in grads.values())))
    floor = ROUNDOFF_FLOOR * model_rms

    # Per element: the gradient is rounding noise (see "roundoff" above).
    noisy = {p: np.abs(g) < floor for p, g in grads.items()}
    at_roundoff = {p for p, mask in noisy.items() if mask.all()}

    def against_update(got, want, before, p):
        """dtc's parameter against PyTorch's, relative to the update over
        the elements with a direction (None if there is none), and the
        largest distance of the rounding-level ones."""
        mask = noisy[p]
        keep = ~mask
        e = (rel(got[keep], want[keep], norm((want - before)[keep]))
             if keep.any() else None)
        drift = float(np.max(np.abs(got - want)[mask])) if mask.any() else 0.0
        return e, drift
    param_of = ref["parameter_of_key"]          # state_dict key -> parameter

    def kind_of(key):
        return ("buffer" if key in buffers else
                "unreached" if param_of.get(key) in unreached else "frozen")
    state_keys = {e["key"]: tuple(e["shape"]) for e in ref["state_dict_keys"]}
    report = Report()

    def torch_param(step, p):
        return tensors[("param:" if step == 0 else f"step{step}:") + p]

    # Losses and gradient norms from the log.
    log = read_log(args.log)
    for s in range(1, args.steps + 1):
        want = ref["losses"][s - 1]
        if s not in log:
            report.fail(f"loss step {s}: no {{\"step\": {s}, \"loss\": ...}} "
                        f"line in {args.log}")
            continue
        got = float(log[s]["loss"])
        e = abs(got - want) / abs(want)
        report.check(e <= LOSS_TOL,
                     f"loss step {s}: dtc {got:.8f} torch {want:.8f} "
                     f"(relative error {e:.2e}, tolerance {LOSS_TOL:.0e})")
        if "grad_norm" in log[s]:
            got = float(log[s]["grad_norm"])
            want = ref["grad_norms"][s - 1]
            e = abs(got - want) / abs(want)
            report.check(e <= NORM_TOL,
                         f"grad_norm step {s}: dtc {got:.8f} torch "
                         f"{want:.8f} (relative error {e:.2e}, tolerance "
                         f"{NORM_TOL:.0e})")

    dirs = step_dirs(args.ckpt, args.steps)
    if not dirs:
        report.fail(f"no checkpoint step directory in {args.ckpt}")
    for step in sorted(dirs):
        if step > args.steps:
            report.fail(f"{dirs[step]} is step {step}, past --steps "
                        f"{args.steps}")
            continue
        ck = Checkpoint(dirs[step])
        keys = ck.tensors
        trained = sorted(k for k in keys
                         if keys[k].get("role") == "parameter"
                         and "exp_avg:" + k in keys)
        # The trained set: PyTorch parameters, each once.
        problems, dtc_name = [], {}
        for k in trained:
            if k in buffers:
                problems.append(f"dtc trained buffer {k}")
            elif k in frozen:
                problems.append(f"dtc trained {k}, which PyTorch does not "
                                f"(requires_grad=False; pass --frozen)")
            elif param_of.get(k) in unreached:
                problems.append(f"dtc trained {k}, which the loss does not "
                                f"reach (PyTorch: no gradient, AdamW skips "
                                f"it)")
            elif k not in param_of:
                problems.append(f"dtc trained {k}, which is not a key of "
                                f"PyTorch's state_dict")
            elif param_of[k] in dtc_name:
                problems.append(f"dtc trains tied {dtc_name[param_of[k]]} "
                                f"and {k} as two tensors")
            else:
                dtc_name[param_of[k]] = k
        for p in parameters:
            if p not in dtc_name:
                aliases = sorted(k for k, v in param_of.items() if v == p)
                problems.append(f"PyTorch parameter {' = '.join(aliases)} "
                                f"is not trained by dtc")
        for k in sorted(keys):
            if keys[k].get("role") in ("parameter", "buffer") \
                    and k in fixed and k not in trained:
                got = ck.read(k)
                if not np.array_equal(got, fixed[k]):
                    problems.append(f"{kind_of(k)}"
                                    f" {k} changed (max abs "
                                    f"{np.max(np.abs(got - fixed[k])):.2e})")
        for text in problems:
            report.fail(f"trained set step {step}: {text}")
        if not problems:
            report.ok(f"trained set step {step}: {len(trained)} tensors, "
                      f"exactly PyTorch's {len(parameters)} parameters"
                      + (f" (tied: {', '.join('='.join(t) for t in ref['tied'])})"
                         if ref["tied"] else ""))

        # Gradients (step 1): exp_avg = (1 - beta1) * clip * g.
        if step == 1:
            clip = None
            if 1 in log and "grad_norm" in log[1]:
                n = float(log[1]["grad_norm"])
                clip = min(1.0, clip_at / (n + 1e-6)) if clip_at > 0 else 1.0
            results = []
            for p, k in sorted(dtc_name.items()):
                m = ck.read("exp_avg:" + k)
                if clip is not None:
                    got, want = m / (1 - beta1) / clip, tensors["grad:" + p]
                else:   # no logged norm: compare the clipped gradients
                    got, want = m / (1 - beta1), tensors["clipped_grad:" + p]
                if got.shape != want.shape:
                    report.fail(f"grads step 1: '{k}' shape {got.shape}, "
                                f"PyTorch {want.shape}")
                    continue
                mask = noisy[p]
                # At rounding level the two agree within the floor (an
                # element just under it in PyTorch may be just over in dtc).
                off = np.abs(got - want)[mask]
                if mask.any() and not np.max(off) < floor:
                    report.fail(f"grads step 1: '{k}' has {int(mask.sum())} "
                                f"elements of PyTorch gradient at rounding "
                                f"level (< {floor:.3g}), dtc's differ by more "
                                f"(max {np.max(off):.3g})")
                    continue
                if mask.all():
                    continue
                keep = ~mask
                e = rel(got[keep], want[keep], norm(want[keep]))
                results.append((k, e))
                if not e <= GRAD_TOL:
                    report.fail(f"grads step 1: '{k}' relative error "
                                f"{e:.2e} (||g_dtc|| {norm(got):.6g}, "
                                f"||g_torch|| {norm(want):.6g}; tolerance "
                                f"{GRAD_TOL:.0e})")
            if results and all(e <= GRAD_TOL for _, e in results):
                report.ok(worst_line("grads step 1", results, GRAD_TOL)
                          + roundoff_note(dtc_name, at_roundoff, noisy))

        # Parameters after the step, relative to the step's update.
        results = []
        for p, k in sorted(dtc_name.items()):
            got = ck.read(k)
            want, before = torch_param(step, p), torch_param(step - 1, p)
            if got.shape != want.shape:
                report.fail(f"params step {step}: '{k}' shape {got.shape}, "
                            f"PyTorch {want.shape}")
                continue
            e, drift = against_update(got, want, before, p)
            if not drift <= 4 * lr * step:
                report.fail(f"params step {step}: '{k}' (gradient at "
                            f"rounding level) is {drift:.3g} from "
                            f"PyTorch's, more than 4 * lr * steps = "
                            f"{4 * lr * step:.3g}")
            if e is None:
                continue
            results.append((k, e))
            if not e <= PARAM_TOL:
                report.fail(f"params step {step}: '{k}' error {e:.2e} of "
                            f"the update (||p_dtc - p_torch|| "
                            f"{norm(got - want):.3e}, update "
                            f"{norm(want - before):.3e}; tolerance "
                            f"{PARAM_TOL:.0e})")
        if results and all(e <= PARAM_TOL for _, e in results):
            report.ok(worst_line(f"params step {step}", results, PARAM_TOL)
                      + roundoff_note(dtc_name, at_roundoff, noisy))

    if args.consolidated:
        step = args.steps
        got = load_safetensors(args.consolidated)
        missing = sorted(set(state_keys) - set(got))
        extra = sorted(set(got) - set(state_keys))
        # A missing key that PyTorch ties to a key the file has (BART's
        # model.shared.weight, XLM-R's lm_head.bias: the export reads the
        # tensor under the other name only) is restored by tie_weights(),
        # which transformers' from_pretrained runs after loading.
        tied_alias = sorted(
            k for k in missing
            if any(param_of.get(k2) == param_of.get(k) for k2 in got
                   if k2 in param_of))
        missing = [k for k in missing if k not in tied_alias]
        # A parameter the loss never reaches that the exporter dropped
        # (forward never reads it: DINOv2's mask_token) has no values in
        # the ONNX file; dtc names it at compile time.
        not_exported = set(ref.get("not_exported", []))
        dropped = [k for k in missing if param_of.get(k) in not_exported]
        missing = [k for k in missing if k not in dropped]
        if missing or extra:
            report.fail(
                "consolidated keys: load_state_dict(strict=True) would "
                "fail: " + "; ".join(
                    x for x in [
                        f"missing {len(missing)}: {', '.join(missing)}"
                        if missing else "",
                        f"unexpected {len(extra)}: {', '.join(extra)}"
                        if extra else ""] if x))
        elif tied_alias or dropped:
            report.ok(f"consolidated keys: the {len(state_keys)} keys of "
                      f"PyTorch's state_dict but " + "; ".join(x for x in [
                          f"{len(tied_alias)} tied "
                          f"alias{'es' if len(tied_alias) > 1 else ''} "
                          f"({', '.join(tied_alias)}) that tie_weights() "
                          f"restores from the key written"
                          if tied_alias else "",
                          f"{len(dropped)} unreached parameter"
                          f"{'s' if len(dropped) > 1 else ''} the export "
                          f"dropped ({', '.join(dropped)})"
                          if dropped else ""] if x))
        else:
            report.ok(f"consolidated keys: the {len(state_keys)} keys of "
                      f"PyTorch's state_dict")
        bad = []
        results = []
        for k in sorted(set(state_keys) & set(got)):
            if tuple(got[k].shape) != state_keys[k]:
                bad.append(f"'{k}' shape {list(got[k].shape)}, PyTorch "
                           f"{list(state_keys[k])}")
                continue
            if k in fixed:
                if not np.array_equal(got[k], fixed[k]):
                    bad.append(f"{kind_of(k)} '{k}' differs from "
                               f"PyTorch's")
                continue
            p = param_of[k]
            want, before = torch_param(step, p), torch_param(step - 1, p)
            e, drift = against_update(got[k], want, before, p)
            if not drift <= 4 * lr * step:
                bad.append(f"'{k}' (gradient at rounding level) past "
                           f"4 * lr * steps")
            if e is None:
                continue
            results.append((k, e))
            if not e <= PARAM_TOL:
                bad.append(f"'{k}' error {e:.2e} of the step-{step} update")
        for text in bad:
            report.fail(f"consolidated values: {text}")
        if not bad and results:
            report.ok("consolidated values: " + worst_line(
                f"step {step}", results, PARAM_TOL) + "; buffers exact")

    print(f"oracle: {report.checks} checks, {report.failed} failed")
    return 1 if report.failed else 0


if __name__ == "__main__":
    sys.exit(main())
