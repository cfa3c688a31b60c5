"""Checks that a run interrupted by a checkpoint and resumed (possibly under
another plan) trains like one uninterrupted run: the per-step losses of the
`dtc run --log-json` logs PART... (in order: consecutive steps up to FULL's
last) equal those of FULL at the same steps, within TOL relative.

usage: compare_losses.py FULL TOL PART [PART...]
"""
import json
import sys


def losses(path):
    return [json.loads(l) for l in open(path) if l.startswith("{")]


full, tol, parts = sys.argv[1], float(sys.argv[2]), sys.argv[3:]
expected = {line["step"]: line["loss"] for line in losses(full)}
resumed = [line for part in parts for line in losses(part)]
steps = [line["step"] for line in resumed]
assert steps == list(range(steps[0], max(expected) + 1)), \
    "the parts cover steps %s, not %d-%d" % (steps, steps[0], max(expected))
worst = max(abs(line["loss"] - expected[line["step"]]) /
            abs(expected[line["step"]]) for line in resumed)
print("steps %d-%d: worst relative loss error %.2e" %
      (steps[0], steps[-1], worst))
print("within %g: %s" % (tol, "yes" if worst <= tol else "NO"))
