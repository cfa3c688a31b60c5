#!/usr/bin/env bash
# The cost model's error on this machine (issue 13): `dtc calibrate --quick`
# describes the machine as a cluster, a small GPT is compiled against it for
# one rank and for two (tp=2), `dtc run --trace` traces 5 steps of each, and
# `dtc plan report --trace` sets the measured step against the model's
# replay of it. Prints per plan the step time measured / predicted and the
# median over kernels of |measured / predicted - 1|, weighted by measured
# time (how far off a typical second of kernel time is priced). The replay
# charges the calibrated per-kernel-call overhead (kernel_overhead_us) on
# every call.
#
# Usage: bench/trace-error.sh [BUILD_DIR] [STEPS]   (default: build, 5)
# Environment: THREADS (OpenMP threads for calibrate and the runs, default
# 1: on a shared 2-core machine one thread per rank is what repeats),
# CLUSTER (an existing calibrated cluster file: skip the calibration),
# KEEP (a directory to keep the bundles, traces and reports in).
# About 30 s on the 2-core reference machine.
set -euo pipefail
cd "$(dirname "$0")/.."
# The project's Python (scripts/setup.sh), not the python3 on PATH.
source scripts/lib/python.sh
build="${1:-build}"
steps="${2:-5}"
export OMP_NUM_THREADS="${THREADS:-1}"
dtc="$build/bin/dtc"
ninja -C "$build" dtc >/dev/null
if [ -n "${KEEP:-}" ]; then
  tmp="$KEEP"
  mkdir -p "$tmp"
else
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
fi

echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg), $OMP_NUM_THREADS thread(s) per rank"
cluster="${CLUSTER:-}"
if [ -z "$cluster" ]; then
  cluster="$tmp/cpu.json"
  "$dtc" calibrate --quick -o "$cluster" | grep -v '^  gemm'
fi

# A small GPT: 2 layers, h = 256, 4 heads, vocab 4096, s = 128, 8 sequences
# per step (fp32: what the CPU runtime computes).
"$dtc" modelgen --arch gpt --layers 2 --hidden 256 --heads 4 --vocab 4096 \
  --seq-len 128 --shape-only -o "$tmp/gpt.onnx" >/dev/null
"$DTC_PYTHON" test/cli/Inputs/make_tokens.py "$tmp/tokens.bin" 100000 4096
# name | compile flags
plans=(
  "1-rank --gpus 1"
  "tp2 --gpus 2 --tp 2 --dp 1 --pp 1 --cp 1 --zero 0"
)
for entry in "${plans[@]}"; do
  read -r name flags <<<"$entry"
  # shellcheck disable=SC2086
  "$dtc" compile "$tmp/gpt.onnx" $flags --cluster "$cluster" --dtype fp32 \
    --recompute none --seq-len 128 --global-batch 8 --micro-batch 8 \
    -o "$tmp/$name.dtc" >/dev/null
  rm -rf "$tmp/$name.trace"
  # Progress lines to the log; shown when the run fails.
  "$dtc" run "$tmp/$name.dtc" --steps "$steps" --data "$tmp/tokens.bin" \
    --init --trace "$tmp/$name.trace" >"$tmp/$name.run.log" 2>&1 ||
    { cat "$tmp/$name.run.log"; exit 1; }
  # No --cluster: plan.json carries the calibrated cluster (cluster.spec),
  # kernel_overhead_us included.
  "$dtc" plan report "$tmp/$name.dtc" --trace "$tmp/$name.trace" \
    -o "$tmp/$name.html" | tee "$tmp/$name.report"
done
echo "load average after:  $(cut -d' ' -f1-3 /proc/loadavg)"

"$DTC_PYTHON" - "$tmp" "${plans[@]}" <<'PY'
import re, sys
tmp, plans = sys.argv[1], [p.split()[0] for p in sys.argv[2:]]
print("%-7s %6s %12s %12s %10s %22s" % ("plan", "step", "measured", "predicted",
                                         "meas/pred", "median kernel error"))
summary = []
for name in plans:
    text = open(f"{tmp}/{name}.report").read()
    m = re.search(r"^trace\s+step (\d+): measured ([\d.]+ \w+), predicted "
                  r"([\d.]+ \w+) \(x([\d.]+)\)", text, re.M)
    e = re.search(r"median kernel error (\d+)%", text)
    if not m:
        print(f"{name}: no trace line in {tmp}/{name}.report")
        sys.exit(1)
    error = e.group(1) + "%" if e else "-"
    print("%-7s %6s %12s %12s %10s %22s" % (name, m.group(1), m.group(2),
                                            m.group(3), "x" + m.group(4), error))
    summary.append(f"{name} x{m.group(4)} (kernels {error})")
print("cost model error on this machine: step measured/predicted " +
      ", ".join(summary))
PY
