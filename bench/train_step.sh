#!/usr/bin/env bash
# CPU training step of a GPT (hidden 512, 4 layers, 8 heads, seq 256, vocab
# 50304, micro-batch 4) on the CPU backend: achieved model GFLOP/s and its
# ratio to the best OpenBLAS sgemm measured in the same run (target >= 0.5),
# and the program's peak memory vs the most bytes of temporaries alive at
# once.
# Usage: bench/train_step.sh [BUILD_DIR] [STEPS]   (default: build, 4)
set -euo pipefail
cd "$(dirname "$0")/.."
# The project's Python (scripts/setup.sh), not the python3 on PATH.
source scripts/lib/python.sh
build="${1:-build}"
steps="${2:-4}"
dtc="$build/bin/dtc"
ninja -C "$build" dtc bench-sgemm >/dev/null
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$dtc" modelgen --arch gpt --layers 4 --hidden 512 --heads 8 --vocab 50304 \
  --seq-len 256 -o "$tmp/gpt.onnx" >/dev/null
"$dtc" compile "$tmp/gpt.onnx" --gpus 1 --global-batch 4 --micro-batch 4 \
  --seq-len 256 -o "$tmp/gpt.dtc" >/dev/null
"$dtc" compile "$tmp/gpt.onnx" --gpus 1 --global-batch 4 --micro-batch 4 \
  --seq-len 256 --emit program | grep '^  func' >"$tmp/memory.txt"
"$DTC_PYTHON" test/cli/Inputs/make_tokens.py "$tmp/tokens.bin" 200000 50304
"$dtc" run "$tmp/gpt.dtc" --steps "$steps" --data "$tmp/tokens.bin" \
  --log-json >"$tmp/log.json"
"$build/bench/runtime/bench-sgemm" >"$tmp/sgemm.txt"

"$DTC_PYTHON" - "$tmp" <<'PY'
import json, re, statistics, sys
tmp = sys.argv[1]
plan = json.load(open(tmp + "/gpt.dtc/plan.json"))
flops_per_token = plan["model"]["flops_per_token"]
steps = [json.loads(l) for l in open(tmp + "/log.json")]
# The first step warms caches and page-faults the arena; report the median
# of the rest.
step_s = statistics.median(s["step_time_s"] for s in steps[1:] or steps)
tokens = 4 * 256
gflops = flops_per_token * tokens / step_s / 1e9
# The baseline: the best OpenBLAS kernel table on this machine, multithreaded
# (bench-sgemm measures each one the CPU runs).
m = re.search(r"^best square-1024: (\S+) ([0-9.]+) GFLOP/s", open(tmp + "/sgemm.txt").read(), re.M)
core, base = m.group(1), float(m.group(2))
print("model FLOPs/token (fwd+bwd)  %.3g" % flops_per_token)
print("step time (median)           %.3f s  (%d tokens)" % (step_s, tokens))
print("achieved                     %.1f GFLOP/s" % gflops)
print("OpenBLAS sgemm 1024^3        %.1f GFLOP/s  (best table: %s)" % (base, core))
print("ratio                        %.2f  (target >= 0.5)" % (gflops / base))
print("loss                         %.3f -> %.3f" % (steps[0]["loss"], steps[-1]["loss"]))
for line in open(tmp + "/memory.txt"):
    m = re.search(r"func (\w+): \d+ instructions, arena (\d+) bytes \(live peak (\d+), all temporaries (\d+)\)", line)
    if m:
        name, arena, live, total = m.group(1), *map(int, m.groups()[1:])
        print("memory %-10s arena %7.1f MiB, live peak %7.1f MiB (x%.3f), no reuse %7.1f MiB"
              % (name, arena / 2**20, live / 2**20, arena / max(live, 1), total / 2**20))
PY
