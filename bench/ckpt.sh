#!/usr/bin/env bash
# Checkpoint cost on the CPU runtime (issue 9), a GPT of 55.7M parameters
# (hidden 1024, 10 layers, vocab 8192: 223 MB of fp32 weights, 668 MB with
# the AdamW moments):
#  - training stall of a save: the step that saves minus the median step
#    that does not, asynchronous (snapshot to host memory, written in the
#    background) vs synchronous (--ckpt-sync: written before training goes
#    on), one rank, saving every 3 steps; target: async stall < 10% of sync;
#  - load time of a resume under dp2 ZeRO-3 (2 ranks, every tensor
#    flattened and halved) from a checkpoint saved under the same plan (no
#    resharding) vs one saved by one rank (every tensor resharded).
# Usage: bench/ckpt.sh [BUILD_DIR] [DIR]   (default: build, a temp dir; the
# checkpoints need about 3 GB of disk)
set -euo pipefail
cd "$(dirname "$0")/.."
# The project's Python (scripts/setup.sh), not the python3 on PATH.
source scripts/lib/python.sh
build="${1:-build}"
dtc="$build/bin/dtc"
ninja -C "$build" dtc >/dev/null
tmp="${2:-$(mktemp -d)}"
mkdir -p "$tmp"
trap 'rm -rf "$tmp"' EXIT
# Training on one core leaves the other to the writer, as a GPU leaves the
# host's cores to it.
export OMP_NUM_THREADS=1

"$dtc" modelgen --arch gpt --layers 10 --hidden 1024 --heads 16 --vocab 8192 \
  --seq-len 64 --shape-only -o "$tmp/gpt.onnx" >/dev/null
"$DTC_PYTHON" test/cli/Inputs/make_tokens.py "$tmp/tokens.bin" 100000 8192
"$dtc" compile "$tmp/gpt.onnx" --gpus 1 --global-batch 2 --micro-batch 2 \
  --seq-len 64 -o "$tmp/one.dtc" >/dev/null
"$dtc" compile "$tmp/gpt.onnx" --gpus 2 --dp 2 --tp 1 --pp 1 --cp 1 --zero 3 \
  --global-batch 2 --micro-batch 1 --seq-len 64 -o "$tmp/z3.dtc" >/dev/null
run() { "$dtc" run "$@" --data "$tmp/tokens.bin" --init --log-json; }

run "$tmp/one.dtc" --steps 10 --save-every 3 --ckpt-dir "$tmp/async" \
  >"$tmp/async.log"
run "$tmp/one.dtc" --steps 10 --save-every 3 --ckpt-dir "$tmp/sync" \
  --ckpt-sync >"$tmp/sync.log"
rm -rf "$tmp/sync"
du -sh "$tmp/async/step-00000003" | awk '{print "checkpoint size:", $1}'

# Loads: ZeRO-3 from ZeRO-3 (same cuts) and from one rank (resharded).
run "$tmp/z3.dtc" --steps 1 --ckpt-dir "$tmp/saved-z3" >/dev/null
run "$tmp/z3.dtc" --steps 1 --ckpt-dir "$tmp/saved-z3" --resume \
  2>"$tmp/load-same.err" >/dev/null
run "$tmp/z3.dtc" --steps 1 --ckpt-dir "$tmp/async" --resume \
  2>"$tmp/load-reshard.err" >/dev/null

"$DTC_PYTHON" - "$tmp" <<'PY'
import json, re, statistics, sys
tmp = sys.argv[1]

def stall(name):
    steps = [json.loads(l) for l in open(f"{tmp}/{name}.log") if l.startswith("{")]
    saving = [s["step_time_s"] for s in steps if s["step"] % 3 == 0]
    plain = statistics.median(s["step_time_s"] for s in steps
                              if s["step"] % 3 and s["step"] > 1)
    return statistics.mean(saving) - plain, plain

a, step = stall("async")
s, _ = stall("sync")
print(f"step without a save: {step:.3f} s")
print(f"stall of a save: async {a:.3f} s, sync {s:.3f} s; "
      f"async / sync = {a / s:.3f} (target < 0.10)")

def load(name):
    text = open(f"{tmp}/{name}.err").read()
    m = re.search(r"resumed at step \d+ from .* in ([0-9.]+) s", text)
    return float(m.group(1)) if m else None

same, reshard = load("load-same"), load("load-reshard")
print(f"load under dp2 ZeRO-3: from dp2 ZeRO-3 {same:.2f} s, from one rank "
      f"(resharded) {reshard:.2f} s; ratio {reshard / same:.2f}")
PY
