#!/usr/bin/env bash
# Tensor-parallel communication in row blocks pipelined with the GEMMs
# (--tp-comm-chunks, passes/training/ChunkCollectives.cpp) on the CPU
# runtime over MPI: a GPT (hidden 512, 4 layers, seq 256, vocab 8192) at
# tp=2, with and without sequence parallelism, compiled whole (1), in 2 and
# in 4 blocks, and with --no-overlap as the serial baseline. Prints the
# median step time of each, its ratio to the whole (unchunked) program run
# in the same invocation, and what the cost model predicted for the same
# plan (plan.json) on the cluster given as $3 (default: the bundled
# CPU-like cluster; a `dtc calibrate` output prices this machine).
# Usage: bench/tp_chunks.sh [BUILD_DIR] [STEPS] [CLUSTER_JSON]
set -euo pipefail
cd "$(dirname "$0")/.."
# The project's Python (scripts/setup.sh), not the python3 on PATH.
source scripts/lib/python.sh
build="${1:-build}"
steps="${2:-6}"
cluster="${3:-test/cli/Inputs/cpu-like-cluster.json}"
dtc="$build/bin/dtc"
ninja -C "$build" dtc >/dev/null
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=1

"$dtc" modelgen --arch gpt --layers 4 --hidden 512 --heads 8 --vocab 8192 \
  --seq-len 256 -o "$tmp/gpt.onnx" >/dev/null
"$DTC_PYTHON" test/cli/Inputs/make_tokens.py "$tmp/tokens.bin" 100000 8192
for sp in off on; do
  common=(--gpus 2 --dp 1 --tp 2 --pp 1 --cp 1 --zero 0 --global-batch 4
          --micro-batch 2 --seq-len 256 --dtype fp32 --cluster "$cluster"
          --sequence-parallel "$sp")
  "$dtc" compile "$tmp/gpt.onnx" "${common[@]}" --no-overlap \
    -o "$tmp/$sp-serial.dtc" >/dev/null
  for k in 1 2 4; do
    "$dtc" compile "$tmp/gpt.onnx" "${common[@]}" --tp-comm-chunks "$k" \
      -o "$tmp/$sp-$k.dtc" >/dev/null
  done
  for b in serial 1 2 4; do
    "$dtc" run "$tmp/$sp-$b.dtc" --steps "$steps" --data "$tmp/tokens.bin" \
      --init --log-json >"$tmp/$sp-$b.log"
  done
done

"$DTC_PYTHON" - "$tmp" <<'PY'
import json, statistics, sys
tmp = sys.argv[1]
def median(name):
    steps = [json.loads(l) for l in open(f"{tmp}/{name}.log") if l.startswith("{")]
    return statistics.median(s["step_time_s"] for s in steps[1:] or steps)
def predicted(name):
    plan = json.load(open(f"{tmp}/{name}.dtc/plan.json"))
    return plan["predicted"]["step_time_s"]
for sp in ("off", "on"):
    whole = median(f"{sp}-1")
    print(f"tp=2 sequence parallelism {sp}: measured (ratio to whole) | predicted")
    for b, label in (("serial", "--no-overlap"), ("1", "whole"),
                     ("2", "2 blocks"), ("4", "4 blocks")):
        t = median(f"{sp}-{b}")
        print(f"  {label:13s} {t*1e3:8.1f} ms  x{whole/t:5.2f} | "
              f"{predicted(f'{sp}-{b}')*1e3:8.1f} ms")
PY
