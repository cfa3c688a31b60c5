"""Checks that `dtc run --log-json` logs of the same model and global batch
under different micro-batches give the same step-1 loss, within TOL
relative of the first log's, and, with --reference JSON (a PyTorch
computation: "step1_loss"), that the first log's loss matches it within
REF_TOL relative. Prints one line per log.

usage: check_same_loss.py TOL LOG [LOG...] [--reference JSON REF_TOL]
"""
import json
import sys

args = sys.argv[1:]
reference = None
if "--reference" in args:
    at = args.index("--reference")
    reference = (args[at + 1], float(args[at + 2]))
    del args[at:at + 3]
tol, logs = float(args[0]), args[1:]


def step1_loss(path):
    lines = [json.loads(l) for l in open(path) if l.startswith("{")]
    return next(line["loss"] for line in lines if line["step"] == 1)


losses = [step1_loss(log) for log in logs]
failed = 0
for log, loss in zip(logs, losses):
    rel = abs(loss - losses[0]) / abs(losses[0])
    ok = rel <= tol
    failed += not ok
    print("%s step-1 loss %.9g (relative %.1e to the first)" %
          ("ok" if ok else "FAIL", loss, rel))
if reference:
    expected = json.load(open(reference[0]))["step1_loss"]
    rel = abs(losses[0] - expected) / abs(expected)
    ok = rel <= reference[1]
    failed += not ok
    print("%s PyTorch step-1 loss %.9g (relative %.1e)" %
          ("ok" if ok else "FAIL", expected, rel))
sys.exit(1 if failed else 0)
