"""Checks an elastic run's `dtc run --log-json` log against an
uninterrupted run of the same bundle: every step line it printed, before
and after the re-plan, has FULL's loss at that step within TOL relative;
the steps after the resume go on one by one from the resumed step to
FULL's last (the lost steps after the last committed one are trained
again, none skipped).

usage: check_elastic.py FULL ELASTIC TOL
"""
import json
import sys


def steps(path):
    return [json.loads(l) for l in open(path) if l.startswith("{")]


full, elastic, tol = steps(sys.argv[1]), steps(sys.argv[2]), float(sys.argv[3])
expected = {line["step"]: line["loss"] for line in full}
order = [line["step"] for line in elastic]
last = max(expected)
# The re-planned run starts after the last committed step, so it may train
# again steps the lost run had printed (the log goes back) or go straight
# on; either way every step is trained and the log ends at FULL's last.
assert set(order) == set(range(1, last + 1)) and order[-1] == last, \
    "%s has steps %s, not 1-%d" % (sys.argv[2], order, last)
back = [i for i in range(1, len(order)) if order[i] <= order[i - 1]]
tail = order[back[-1]:] if back else order
assert tail == list(range(tail[0], last + 1)), \
    "after the resume the steps are %s" % tail
worst = max(abs(line["loss"] - expected[line["step"]]) /
            abs(expected[line["step"]]) for line in elastic)
print("steps %s; worst relative loss error %.2e" %
      (" ".join(map(str, order)), worst))
print("within %g: %s" % (tol, "yes" if worst <= tol else "NO"))
