#!/usr/bin/env bash
# Zero-bubble pipelining (issue 58) on the CPU runtime over MPI: a GPT
# (8 layers, hidden 256, seq 128, vocab 256) at pp=4 (4 ranks, one per
# stage) over M micro-batches, compiled with --schedule 1f1b and
# --schedule zb-h1 and run with --trace. From each rank's trace of every
# step after the first: the stage's busy time (its pass functions' events)
# and the span of its pipeline step; the measured bubble is the idle share
# of the span, averaged over the stages. F, B and W are the measured mean
# times of a forward, input-gradient and weight-gradient pass (1F1B's
# backward is B + W), and the predicted bubble is the schedule's formula on
# them: idle (p-1)(F+B+W) for 1F1B and (p-1)(F+B-W) for ZB-H1 over a span
# of m (F+B+W) plus that idle. The cost model's own bubble_fraction (from
# its GPU op costs) is printed beside it. Peak memory: --log-json's
# peak_memory_bytes (the largest rank's executor memory, pooled buffers
# included). Ratios are to 1F1B in the same run.
# On the 2-core reference machine pp=4 runs 4 ranks on 2 cores: stages
# time-share the cores, so idle gaps also hold time a rank was runnable
# but descheduled, and the measured bubble is well above what the
# schedule's formula gives (docs/runtime.md, "Zero-bubble schedules").
# Usage: [PP=4] bench/zero_bubble.sh [BUILD_DIR] [STEPS] [MICRO_BATCHES]
#        (default: build, 5, 16); PP=2 runs one rank per core here.
set -euo pipefail
cd "$(dirname "$0")/.."
# The project's Python (scripts/setup.sh), not the python3 on PATH.
source scripts/lib/python.sh
build="${1:-build}"
steps="${2:-5}"
micro="${3:-16}"
dtc="$build/bin/dtc"
[ -n "${NO_BUILD:-}" ] || ninja -C "$build" dtc >/dev/null
tmp=$(mktemp -d)
# KEEP=1 keeps the bundles, logs and traces (their folder is printed).
if [ -n "${KEEP:-}" ]; then echo "outputs in $tmp"; else trap 'rm -rf "$tmp"' EXIT; fi
export OMP_NUM_THREADS=1

"$dtc" modelgen --arch gpt --layers 8 --hidden 256 --heads 4 --vocab 256 \
  --seq-len 128 -o "$tmp/gpt.onnx" >/dev/null
"$DTC_PYTHON" test/cli/Inputs/make_tokens.py "$tmp/tokens.bin" 200000 256
pp="${PP:-4}"
common=(--gpus "$pp" --dp 1 --tp 1 --pp "$pp" --cp 1 --zero 0 --global-batch "$micro"
        --micro-batch 1 --seq-len 128)
for s in 1f1b zb-h1; do
  "$dtc" compile "$tmp/gpt.onnx" "${common[@]}" --schedule "$s" \
    -o "$tmp/$s.dtc" >/dev/null
  "$dtc" run "$tmp/$s.dtc" --steps "$steps" --data "$tmp/tokens.bin" --init \
    --trace "$tmp/$s.trace" --log-json >"$tmp/$s.log" 2>"$tmp/$s.err"
done

"$DTC_PYTHON" - "$tmp" "$micro" <<'PY'
import glob, json, statistics, sys
tmp, m = sys.argv[1], int(sys.argv[2])

def measure(name):
    """Per stage (rank) and step after the first: busy time of its pass
    functions, their weight-gradient part, and the pipeline step's span."""
    stages = []
    for path in sorted(glob.glob(f"{tmp}/{name}.trace/rank-*.trace.json")):
        events = [e for e in json.load(open(path))["traceEvents"]
                  if e.get("cat") == "compute"
                  and e["args"].get("function", "").startswith("chunk")]
        steps = sorted({e["args"]["step"] for e in events})
        rows = []
        for step in steps[1:]:  # the first step warms up
            ev = [e for e in events if e["args"]["step"] == step]
            span = max(e["ts"] + e["dur"] for e in ev) - min(e["ts"] for e in ev)
            busy = sum(e["dur"] for e in ev)
            weight = sum(e["dur"] for e in ev
                         if e["args"]["function"].endswith("_weight"))
            rows.append((span, busy, weight))
        stages.append([statistics.mean(c) for c in zip(*rows)])
    log = [json.loads(l) for l in open(f"{tmp}/{name}.log") if l.startswith("{")]
    plan = json.load(open(f"{tmp}/{name}.dtc/plan.json"))
    return dict(
        stages=stages,
        bubble=statistics.mean(1 - busy / span for span, busy, _ in stages),
        peak=max(r.get("peak_memory_bytes", 0) for r in log),
        step=statistics.median(r["step_time_s"] for r in log[1:]),
        model=plan["predicted"]["bubble_fraction"])

def predicted(r, zero_bubble):
    """The cost model's pipelineTime on the measured per-micro-batch stage
    times t and weight gradients W: m max(t) plus the other stages' t (1F1B)
    or t - 2W (ZB-H1); the bubble is each stage's idle share of it."""
    t = [busy / m for _, busy, _ in r["stages"]]
    w = [weight / m for _, _, weight in r["stages"]]
    slow = max(range(len(t)), key=lambda i: t[i])
    fill = [max(0.0, t[i] - 2 * w[i]) if zero_bubble else t[i]
            for i in range(len(t))]
    span = m * t[slow] + sum(fill) - fill[slow]
    return statistics.mean(1 - m * ti / span for ti in t)

one, zb = measure("1f1b"), measure("zb-h1")
p = len(one["stages"])
pred = {"1f1b": predicted(one, False), "zb-h1": predicted(zb, True)}
t = sum(b for _, b, _ in zb["stages"]) / m / p
w = sum(x for _, _, x in zb["stages"]) / m / p
print(f"pp={p}, m={m} micro-batches; ZB-H1 per stage and micro-batch: "
      f"F+B+W {t/1e3:.2f} ms, W {w/1e3:.2f} ms (W share {w/t:.2f})")
print(f"{'schedule':9} {'bubble':>8} {'predicted':>10} {'pred/meas':>10} "
      f"{'cost model':>11} {'step ms':>9} {'peak MB':>9}")
for name, r in (("1f1b", one), ("zb-h1", zb)):
    print(f"{name:9} {r['bubble']:8.3f} {pred[name]:10.3f} "
          f"{pred[name]/r['bubble']:10.2f} {r['model']:11.3f} "
          f"{r['step']*1e3:9.1f} {r['peak']/2**20:9.1f}")
print(f"zb-h1 / 1f1b: bubble {zb['bubble']/one['bubble']:.2f}x, step time "
      f"{zb['step']/one['step']:.2f}x, peak memory {zb['peak']/one['peak']:.2f}x")
ok = (zb["bubble"] < one["bubble"] and
      abs(pred["zb-h1"] / zb["bubble"] - 1) <= 0.25)
print("acceptance (zb-h1 bubble below 1f1b's; predicted within 25%):",
      "met" if ok else "NOT met")
PY
