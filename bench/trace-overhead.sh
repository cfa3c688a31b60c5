#!/usr/bin/env bash
# What `dtc run --trace` costs on the CPU backend (issue 13: target < 5% of
# the step time): a GPT (4 layers, hidden 256, 4 heads, seq 128, vocab 8192,
# global batch 8) trained on 1 rank and on tp2 (2 ranks), traced and
# untraced runs interleaved (so that load from other processes hits both
# alike), median step time of steps 2.. of each run; the step time of a
# traced run includes writing its trace.
# Usage: bench/trace-overhead.sh [BUILD_DIR] [STEPS] [ROUNDS]  (build, 8, 3)
set -euo pipefail
cd "$(dirname "$0")/.."
# The project's Python (scripts/setup.sh), not the python3 on PATH.
source scripts/lib/python.sh
build="${1:-build}"
steps="${2:-8}"
rounds="${3:-3}"
dtc="$build/bin/dtc"
ninja -C "$build" dtc >/dev/null
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$dtc" modelgen --arch gpt --layers 4 --hidden 256 --heads 4 --vocab 8192 \
  --seq-len 128 -o "$tmp/gpt.onnx" >/dev/null
"$DTC_PYTHON" test/cli/Inputs/make_tokens.py "$tmp/tokens.bin" 100000 8192
"$dtc" compile "$tmp/gpt.onnx" --gpus 1 --global-batch 8 --micro-batch 8 \
  --seq-len 128 --dtype fp32 -o "$tmp/one.dtc" >/dev/null
"$dtc" compile "$tmp/gpt.onnx" --gpus 2 --dp 1 --tp 2 --pp 1 --cp 1 \
  --zero 0 --global-batch 8 --micro-batch 8 --seq-len 128 --dtype fp32 \
  -o "$tmp/tp2.dtc" >/dev/null

for plan in one tp2; do
  for round in $(seq "$rounds"); do
    "$dtc" run "$tmp/$plan.dtc" --init --steps "$steps" \
      --data "$tmp/tokens.bin" --log-json >"$tmp/$plan-plain-$round.log"
    "$dtc" run "$tmp/$plan.dtc" --init --steps "$steps" \
      --data "$tmp/tokens.bin" --log-json --trace "$tmp/trace-$plan" \
      >"$tmp/$plan-traced-$round.log" 2>/dev/null
  done
done

"$DTC_PYTHON" - "$tmp" "$rounds" <<'PY'
import glob, json, os, statistics, sys
tmp, rounds = sys.argv[1], int(sys.argv[2])
def steps(path):
    lines = [json.loads(l) for l in open(path) if l.startswith("{")]
    return [l["step_time_s"] for l in lines[1:]]
for plan, ranks in (("one", 1), ("tp2", 2)):
    plain = statistics.median(t for r in range(1, rounds + 1)
                              for t in steps("%s/%s-plain-%d.log" % (tmp, plan, r)))
    traced = statistics.median(t for r in range(1, rounds + 1)
                               for t in steps("%s/%s-traced-%d.log" % (tmp, plan, r)))
    size = sum(os.path.getsize(f) for f in glob.glob("%s/trace-%s/*.json" % (tmp, plan)))
    print("trace overhead %-4s (%d rank%s): step %.2f ms untraced, %.2f ms traced: %+.1f%% (target < 5%%); %.1f MB of traces"
          % (plan, ranks, "s" if ranks > 1 else "", 1e3 * plain, 1e3 * traced,
             100 * (traced / plain - 1), size / 1e6))
PY
