"""Checks a `dtc run --log-json` log: the first loss is near ln(VOCAB) and
the last is below it by at least MARGIN nats.

usage: check_loss.py LOG VOCAB MARGIN
"""
import json
import math
import sys

log, vocab, margin = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
lines = [json.loads(l) for l in open(log) if l.startswith("{")]
first, last = lines[0]["loss"], lines[-1]["loss"]
print("steps %d: loss %.4f -> %.4f (ln vocab %.4f)" %
      (lines[-1]["step"], first, last, math.log(vocab)))
assert all(k in lines[0] for k in ("step", "loss", "tokens_per_s"))
assert abs(first - math.log(vocab)) < 0.5, "first loss is not ~ln(vocab)"
assert last < math.log(vocab) - margin, "the loss did not drop by the margin"
