#!/usr/bin/env bash
# Issue 32's figures: the whole `dtc compile` (program included) of
# shape-only models, its peak memory and the bundle it writes, for four
# model / cluster sizes, then how they grow with the GPU count (Llama-2-70B
# on 64 to 16384 GPUs) and with the micro-batches of a pipeline (8 to 512).
# Targets (issue 32): 70B/64 <= 5 s, 175B/1024 <= 10 s, 1T/3072 <= 10 s,
# 405B/16384 <= 15 s; peak <= 2 GB; bundle <= 50 MB; growth within +-20 %.
#
# Usage: bench/compile_scale.sh [BUILD_DIR] [--quick]
#   --quick   the four sizes only, no growth series
# DTC_COMPILE_TIMEOUT_S (default 600) stops a case that runs longer, and
# DTC_COMPILE_MEMORY_GB (default 16) one that would take more memory (at
# 16384 GPUs layout.json alone was estimated at 25 GB); such a case is
# printed as "timeout" or "failed", not left out.
set -euo pipefail
cd "$(dirname "$0")/.."
build="build"
quick=0
for arg in "$@"; do
  case "$arg" in
    --quick) quick=1 ;;
    *) build="$arg" ;;
  esac
done
dtc="$build/bin/dtc"
[ -x "$dtc" ] || { echo "compile_scale: $dtc not built (scripts/build.sh)" >&2; exit 2; }
limit="${DTC_COMPILE_TIMEOUT_S:-600}"
memory_kb=$(( ${DTC_COMPILE_MEMORY_GB:-16} * 1048576 ))
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

. bench/shape_models.sh
shape_models "$dtc" "$tmp"

mb() { awk "BEGIN { printf \"%.1f\", $1 / 1048576 }"; }
size_of() { [ -f "$1" ] && stat -c %s "$1" || echo 0; }

printf '%-11s %6s %-9s %6s %9s %8s %9s %9s %9s  %s\n' model gpus cluster \
  target wall_s peak_MB bundle_MB layout_MB program_MB plan
# case MODEL GPUS CLUSTER TARGET_S [dtc compile flags...]; sets $wall
case_row() {
  local model=$1 gpus=$2 cluster=$3 target=$4
  shift 4
  local out="$tmp/$model-$gpus.dtc" start end rc=0
  rm -rf "$out"
  start=$(date +%s.%N)
  (ulimit -v "$memory_kb"
   exec timeout "$limit" /usr/bin/time -f '%M' -o "$tmp/rss" "$dtc" compile \
    "$tmp/$model.onnx" --gpus "$gpus" --cluster "$cluster" "$@" -o "$out") \
    >"$tmp/log" 2>&1 || rc=$?
  end=$(date +%s.%N)
  wall=$(awk "BEGIN { printf \"%.2f\", $end - $start }")
  if [ "$rc" = 124 ]; then
    printf '%-11s %6s %-9s %6s %9s\n' "$model" "$gpus" "$cluster" "$target" \
      "timeout>${limit}s"
    wall=""
    return
  fi
  if [ "$rc" != 0 ]; then
    printf '%-11s %6s %-9s %6s failed: %s\n' "$model" "$gpus" "$cluster" \
      "$target" "$(grep -m1 -E 'error|bad_alloc|terminate|LLVM ERROR|Killed' "$tmp/log" ||
        echo "exit code $rc")"
    wall=""
    return
  fi
  local bundle layout program plan
  bundle=$(du -sb "$out" | cut -f1)
  layout=$(size_of "$out/layout.json")
  program=$(size_of "$out/program.pb")
  plan=$(sed -n 's/^plan     //p' "$tmp/log" | cut -d, -f1)
  printf '%-11s %6s %-9s %6s %9s %8s %9s %9s %9s  %s\n' "$model" "$gpus" \
    "$cluster" "$target" "$wall" "$(($(cat "$tmp/rss") / 1024))" \
    "$(mb "$bundle")" "$(mb "$layout")" "$(mb "$program")" "$plan"
  bundle_bytes=$bundle
  rm -rf "$out"
}

case_row llama-70b 64 h100 5
case_row gpt3-175b 1024 a100-80g 10
case_row gpt-1t 3072 a100-80g 10
case_row llama-405b 16384 h100 15
[ "$quick" = 1 ] && exit 0

# growth NAME: first and last of a series, as a ratio.
series() { # label, then one "wall bundle" pair per row on stdin
  awk -v label="$1" 'NR == 1 { w0 = $1; b0 = $2 } { w = $1; b = $2 }
    END { if (NR > 1 && w0 > 0 && b0 > 0)
            printf "%s: compile time x%.2f, bundle x%.2f (target: within 0.8-1.2)\n",
                   label, w / w0, b / b0 }'
}

echo
echo "growth with the GPU count: llama-70b, tp 8, pp 4 pinned, dp grows"
: >"$tmp/gpus"
for gpus in 64 256 1024 4096 16384; do
  case_row llama-70b "$gpus" h100 - --tp 8 --pp 4 --micro-batch 1 \
    --global-batch $((gpus / 32 * 16))
  [ -n "$wall" ] && echo "$wall $bundle_bytes" >>"$tmp/gpus"
done
series "64 -> 16384 GPUs" <"$tmp/gpus"

echo
echo "growth with the micro-batches: llama-70b on 64 GPUs, dp2 tp8 pp4, micro-batch 1"
: >"$tmp/mbs"
for micro in 8 32 128 512; do
  case_row llama-70b 64 h100 - --dp 2 --tp 8 --pp 4 --micro-batch 1 \
    --global-batch $((2 * micro))
  [ -n "$wall" ] && echo "$wall $bundle_bytes" >>"$tmp/mbs"
done
series "8 -> 512 micro-batches" <"$tmp/mbs"
