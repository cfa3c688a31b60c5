#!/usr/bin/env bash
# Wall time of the whole `dtc compile` (import + fold + raise + plan search +
# bundle) from shape-only models, the planner issue's speed targets:
# 70B on 64 GPUs < 1 s, 175B on 1024 < 2 s, 1T on 3072 < 5 s.
# Usage: bench/compile_speed.sh [BUILD_DIR]   (default: build)
set -euo pipefail
cd "$(dirname "$0")/.."
dtc="${1:-build}/bin/dtc"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

. bench/shape_models.sh
shape_models "$dtc" "$tmp"

printf '%-10s %6s %-9s %9s %9s  %s\n' model gpus cluster wall_s target_s plan
run() {
  local model=$1 gpus=$2 cluster=$3 target=$4
  local start end plan
  start=$(date +%s.%N)
  plan=$("$dtc" compile "$tmp/$model.onnx" --gpus "$gpus" --cluster "$cluster" \
    -o "$tmp/$model.dtc" | sed -n 's/^plan     //p')
  end=$(date +%s.%N)
  printf '%-10s %6s %-9s %9.2f %9s  %s\n' "$model" "$gpus" "$cluster" \
    "$(awk "BEGIN { print $end - $start }")" "$target" "$plan"
}
run llama-70b 64 h100 1
run gpt3-175b 1024 a100-80g 2
run gpt-1t 3072 a100-80g 5
