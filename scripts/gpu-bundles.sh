#!/usr/bin/env bash
# Compiles the two bundles scripts/gpu-check.sh runs, with DTC, into OUT:
#   tiny.dtc  a 2-block GPT (hidden 128): CUDA losses against the CPU kernels
#   gpt.dtc   4 blocks, hidden 1024, 16 heads (head dim 64), seq 1024, GPT-2's
#             padded vocabulary, micro-batch 8 (8192 tokens a step): TFLOP/s
# Usage: scripts/gpu-bundles.sh DTC OUT
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: scripts/gpu-bundles.sh DTC OUT" >&2; exit 2; }
dtc=$1
out=$2
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$dtc" modelgen --arch gpt --layers 2 --hidden 128 --heads 4 --vocab 1000 \
  --seq-len 64 -o "$tmp/tiny.onnx" >/dev/null
"$dtc" compile "$tmp/tiny.onnx" --gpus 1 --global-batch 2 --micro-batch 2 \
  --seq-len 64 -o "$out/tiny.dtc" >/dev/null
"$dtc" modelgen --arch gpt --layers 4 --hidden 1024 --heads 16 \
  --vocab 50304 --seq-len 1024 -o "$tmp/gpt.onnx" >/dev/null
"$dtc" compile "$tmp/gpt.onnx" --gpus 1 --global-batch 8 --micro-batch 8 \
  --seq-len 1024 -o "$out/gpt.dtc" >/dev/null
