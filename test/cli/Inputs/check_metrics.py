#!/usr/bin/env python3
"""Checks the metrics of a `dtc run --log-json` log: every line has the
documented fields (docs/observability.md), each within its range.

usage: check_metrics.py LOG STEPS [pipeline] [moe=LAYERS,EXPERTS,TOKENS,TOPK]

With "pipeline", the measured bubble must be above zero (a pipeline stage
waits for its neighbours at least at the start and end of each step). With
"moe=...", every line has the MoE routing figures: per layer, one count per
expert, the counts summing to TOKENS (per step) times TOPK; drop rate and
imbalance within range, a positive load-balancing loss.
"""
import json
import sys

path, steps = sys.argv[1], int(sys.argv[2])
pipeline = "pipeline" in sys.argv[3:]
moe = [a[4:] for a in sys.argv[3:] if a.startswith("moe=")]
moe = [int(x) for x in moe[0].split(",")] if moe else None
lines = [json.loads(l) for l in open(path) if l.startswith("{")]
if [l["step"] for l in lines] != list(range(1, steps + 1)):
    sys.exit("check_metrics: steps %r" % [l.get("step") for l in lines])
fields = ["loss", "grad_norm", "lr", "tokens_per_s", "step_time_s", "tflops",
          "mfu", "peak_memory_bytes", "peak_memory_rank", "exposed_comm_s",
          "exposed_comm_fraction", "bubble_fraction"]
for l in lines:
    missing = [f for f in fields if f not in l]
    if missing:
        sys.exit("check_metrics: step %d lacks %s" % (l["step"], missing))
    ok = (l["tokens_per_s"] > 0 and l["step_time_s"] > 0 and
          l["tflops"] > 0 and 0 < l["mfu"] < 1 and
          l["peak_memory_bytes"] > 1 << 20 and l["peak_memory_rank"] >= 0 and
          0 <= l["exposed_comm_s"] <= l["step_time_s"] and
          0 <= l["exposed_comm_fraction"] <= 1 and
          0 <= l["bubble_fraction"] <= 1)
    # TFLOP/s is the model's FLOPs per token times tokens per second.
    if not ok:
        sys.exit("check_metrics: out of range at step %d: %r" % (l["step"], l))
    if pipeline and not l["bubble_fraction"] > 0:
        sys.exit("check_metrics: no bubble measured at step %d" % l["step"])
    if moe:
        layers, experts, tokens, topk = moe
        m = l.get("moe")
        if not m:
            sys.exit("check_metrics: step %d has no moe figures" % l["step"])
        counts = m["expert_tokens"]
        if len(counts) != layers or any(len(c) != experts for c in counts):
            sys.exit("check_metrics: expert_tokens shape %r" % counts)
        if any(sum(c) != tokens * topk for c in counts):
            sys.exit("check_metrics: step %d: per-layer counts %r do not sum "
                     "to %d tokens x top-%d" % (l["step"], [sum(c) for c in
                                                  counts], tokens, topk))
        if not (0 <= m["drop_rate"] <= 1 and m["imbalance"] >= 0 and
                m["aux_loss"] > 0):
            sys.exit("check_metrics: moe figures out of range: %r" % m)
print("metrics: %d steps, every field in range%s" %
      (len(lines), ", moe counts sum to tokens x top-k" if moe else ""))
