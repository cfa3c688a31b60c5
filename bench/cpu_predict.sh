#!/usr/bin/env bash
# Predicted vs measured step time of CPU-backend training runs (issue 5):
# `dtc calibrate` measures this machine, then for three GPT sizes on one
# rank and the middle one under dp2, tp2 and pp2 (two MPI ranks)
# `dtc compile --cluster calibrated.json` predicts the step time
# (plan.json predicted.step_time_s) and `dtc run --log-json` measures it
# (median step_time_s, the first step left out as warm-up). PASS when every
# ratio is within 25%.
#
# Usage: bench/cpu_predict.sh [BUILD_DIR] [STEPS]   (default: build, 4)
# Environment: THREADS (OpenMP threads for calibrate and run, default 1:
# on a shared 2-core machine one thread is what gives repeatable numbers),
# CLUSTER (an existing calibrated.json: skip the calibration).
set -euo pipefail
cd "$(dirname "$0")/.."
# The project's Python (scripts/setup.sh), not the python3 on PATH.
source scripts/lib/python.sh
build="${1:-build}"
steps="${2:-4}"
export OMP_NUM_THREADS="${THREADS:-1}"
dtc="$build/bin/dtc"
ninja -C "$build" dtc >/dev/null
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg), $OMP_NUM_THREADS thread(s)"
cluster="${CLUSTER:-}"
if [ -z "$cluster" ]; then
  cluster="$tmp/calibrated.json"
  "$dtc" calibrate -o "$cluster" | grep -v '^  gemm'
fi

# name layers hidden heads vocab seq batch plan (dp x tp x pp; one rank per
# process, each with the calibrated thread count)
sizes=(
  "gpt-s 2 256 4 4096 128 8 1x1x1"
  "gpt-m 4 512 8 8192 256 4 1x1x1"
  "gpt-l 6 768 12 8192 256 4 1x1x1"
  "gpt-m-dp2 4 512 8 8192 256 8 2x1x1"
  "gpt-m-tp2 4 512 8 8192 256 4 1x2x1"
  "gpt-m-pp2 4 512 8 8192 256 8 1x1x2"
)
for size in "${sizes[@]}"; do
  read -r name layers hidden heads vocab seq batch plan <<<"$size"
  IFS=x read -r dp tp pp <<<"$plan"
  gpus=$((dp * tp * pp))
  # Two micro-batches per pipeline stage pass, one otherwise.
  micro=$((batch / dp / (pp > 1 ? 2 : 1)))
  "$dtc" modelgen --arch gpt --layers "$layers" --hidden "$hidden" \
    --heads "$heads" --vocab "$vocab" --seq-len "$seq" --shape-only \
    -o "$tmp/$name.onnx" >/dev/null
  "$dtc" compile "$tmp/$name.onnx" --gpus "$gpus" --dp "$dp" --tp "$tp" \
    --pp "$pp" --cp 1 --ep 1 --zero 0 --sequence-parallel off \
    --cluster "$cluster" --dtype fp32 --recompute none --seq-len "$seq" \
    --global-batch "$batch" --micro-batch "$micro" -o "$tmp/$name.dtc" \
    >/dev/null
  "$DTC_PYTHON" test/cli/Inputs/make_tokens.py "$tmp/$name.bin" 100000 "$vocab"
  "$dtc" run "$tmp/$name.dtc" --steps "$steps" --data "$tmp/$name.bin" \
    --init --log-json >"$tmp/$name.log"
  echo "$name $layers $hidden $heads $vocab $seq $batch $plan" >>"$tmp/sizes.txt"
done
echo "load average after:  $(cut -d' ' -f1-3 /proc/loadavg)"

"$DTC_PYTHON" - "$tmp" <<'PY'
import json, statistics, sys
tmp = sys.argv[1]
print("%-9s %-35s %10s %10s %7s" % ("model",
                                    "layers/hidden/heads/vocab/seq/batch/plan",
                                    "predicted", "measured", "ratio"))
ok = True
for line in open(tmp + "/sizes.txt"):
    name, *dims = line.split()
    plan = json.load(open("%s/%s.dtc/plan.json" % (tmp, name)))
    predicted = plan["predicted"]["step_time_s"]
    steps = [json.loads(l) for l in open("%s/%s.log" % (tmp, name))]
    measured = statistics.median(s["step_time_s"] for s in steps[1:] or steps)
    ratio = predicted / measured
    ok = ok and abs(ratio - 1) <= 0.25
    print("%-9s %-35s %8.3f s %8.3f s %7.2f" % (name, "/".join(dims), predicted,
                                               measured, ratio))
print("PASS" if ok else "FAIL", "(every predicted/measured within 25%)")
sys.exit(0 if ok else 1)
PY
