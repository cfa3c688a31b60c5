#!/usr/bin/env bash
# Data-parallel gradient sync overlapped with the backward pass, on the CPU
# runtime over MPI: a GPT (hidden 256, 4 layers, seq 128, vocab 8192) at
# dp=4 with one micro-batch per rank per step (every step syncs), compiled
# with and without --no-overlap. Prints the median step time of each, the
# speedup, and the fraction of the exposed sync that overlap hides:
# (T_no_overlap - T_overlap) / (T_no_overlap - T_one_rank), with T_one_rank
# the step of one rank doing the same per-rank work without any sync (an
# estimate of the compute: on a shared CPU the ranks also compete for cores).
# Then the same model at ZeRO-3, with and without the parameter prefetch.
# Usage: bench/overlap.sh [BUILD_DIR] [STEPS]   (default: build, 8)
set -euo pipefail
cd "$(dirname "$0")/.."
# The project's Python (scripts/setup.sh), not the python3 on PATH.
source scripts/lib/python.sh
build="${1:-build}"
steps="${2:-8}"
dtc="$build/bin/dtc"
ninja -C "$build" dtc >/dev/null
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=1

"$dtc" modelgen --arch gpt --layers 4 --hidden 256 --heads 4 --vocab 8192 \
  --seq-len 128 -o "$tmp/gpt.onnx" >/dev/null
"$DTC_PYTHON" test/cli/Inputs/make_tokens.py "$tmp/tokens.bin" 100000 8192
common=(--dp 4 --tp 1 --pp 1 --cp 1 --zero 0 --global-batch 8 --micro-batch 2
        --seq-len 128 --grad-bucket-mb 1)
"$dtc" compile "$tmp/gpt.onnx" --gpus 4 "${common[@]}" -o "$tmp/on.dtc" >/dev/null
"$dtc" compile "$tmp/gpt.onnx" --gpus 4 "${common[@]}" --no-overlap \
  -o "$tmp/off.dtc" >/dev/null
"$dtc" compile "$tmp/gpt.onnx" --gpus 1 --global-batch 2 --micro-batch 2 \
  --seq-len 128 -o "$tmp/one.dtc" >/dev/null
# ZeRO-3: parameters gathered before each pass, prefetched up to one
# transformer block ahead (overlap) or each right before its use.
z3=(--dp 4 --tp 1 --pp 1 --cp 1 --zero 3 --global-batch 8 --micro-batch 2
    --seq-len 128)
"$dtc" compile "$tmp/gpt.onnx" --gpus 4 "${z3[@]}" -o "$tmp/z3on.dtc" >/dev/null
"$dtc" compile "$tmp/gpt.onnx" --gpus 4 "${z3[@]}" --no-overlap \
  -o "$tmp/z3off.dtc" >/dev/null
for b in on off one z3on z3off; do
  "$dtc" run "$tmp/$b.dtc" --steps "$steps" --data "$tmp/tokens.bin" --init \
    --log-json >"$tmp/$b.log"
done

"$DTC_PYTHON" - "$tmp" <<'PY'
import json, statistics, sys
tmp = sys.argv[1]
def median(name):
    steps = [json.loads(l) for l in open(f"{tmp}/{name}.log") if l.startswith("{")]
    return statistics.median(s["step_time_s"] for s in steps[1:] or steps)
on, off, one = median("on"), median("off"), median("one")
exposed = off - one
hidden = (off - on) / exposed if exposed > 0 else float("nan")
print(f"dp=4 step, sync after backward (--no-overlap): {off*1e3:8.1f} ms")
print(f"dp=4 step, sync overlapped with backward:      {on*1e3:8.1f} ms")
print(f"one rank, same per-rank work (no sync):        {one*1e3:8.1f} ms")
print(f"speedup from overlap: {off/on:.2f}x; hidden fraction of the exposed "
      f"sync: {hidden:.2f}")
z3on, z3off = median("z3on"), median("z3off")
print(f"dp=4 ZeRO-3 step, gathers right before use (--no-overlap): "
      f"{z3off*1e3:8.1f} ms")
print(f"dp=4 ZeRO-3 step, gathers prefetched up to a block ahead:   "
      f"{z3on*1e3:8.1f} ms  ({z3off/z3on:.2f}x)")
PY
