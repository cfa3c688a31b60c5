#!/usr/bin/env bash
# dtc's CPU runtime against PyTorch on the same CPU, in one run (issue 31):
# a GPT and a Llama-style model (RMSNorm, SwiGLU, GQA), 4 layers, hidden 512,
# sequence 256, micro-batch 4, and the GPT at tiny-gpt's shape (issue 60),
# written in PyTorch (bench/vs_pytorch/models.py)
# and exported to ONNX for dtc. One rank against eager PyTorch with every
# core, and a dp2 plan against DistributedDataParallel (gloo) with two
# processes. Prints step time, tokens/s, peak memory and dtc / PyTorch.
#
# PyTorch is a benchmark-only dependency: the newest torch, onnx and
# onnxscript are installed into their own venv (.venv-bench, or
# $DTC_BENCH_VENV), never needed by the tests.
# Usage: bench/vs_pytorch.sh [BUILD_DIR] [STEPS]   (default: build, 6)
set -euo pipefail
cd "$(dirname "$0")/.."
build="${1:-build}"
steps="${2:-6}"
source bench/vs_pytorch/venv.sh
ninja -C "$build" dtc >/dev/null
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$venv/bin/python" -c 'import torch; print("torch", torch.__version__,
  "threads", torch.get_num_threads(), "blas", torch.__config__.show()
  .split("BLAS_INFO=")[1].split(",")[0])'
# The exporter's chatter goes to a log, shown when a run fails.
for model in tiny gpt llama; do
  for ranks in "" --dp2; do
    "$venv/bin/python" bench/vs_pytorch/run.py "$build/bin/dtc" "$tmp" \
      "$model" --steps "$steps" $ranks 2>"$tmp/log" || { cat "$tmp/log"; exit 1; }
  done
done
