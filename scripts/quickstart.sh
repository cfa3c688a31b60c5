#!/usr/bin/env bash
# The README's first command: installs, builds, compiles the bundled example
# (a small GPT exported from PyTorch) for 8 GPUs and shows the plan, then
# compiles it for one device and trains it for 50 steps on the CPU runtime,
# and for 4 ranks (dp=2 x tp=2, one MPI process each): trains 10 steps with a
# checkpoint, resumes it under a 2-stage pipeline plan up to step 20, and
# checks with `dtc verify` that the plan computes what one device computes.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
source scripts/lib/python.sh
build="${DTC_BUILD_DIR:-build}"
"$build/bin/dtc" compile test/models/tiny-gpt.onnx --gpus 8 --seq-len 32 \
  -o "$build/tiny-gpt.dtc"
"$build/bin/dtc" plan show "$build/tiny-gpt.dtc"
"$build/bin/dtc" compile test/models/tiny-gpt.onnx --gpus 1 --global-batch 8 \
  --micro-batch 4 --lr 1e-3 --warmup-steps 5 -o "$build/tiny-gpt-1.dtc"
"$DTC_PYTHON" test/cli/Inputs/make_tokens.py "$build/tokens.bin" 20000 256
"$build/bin/dtc" run "$build/tiny-gpt-1.dtc" --steps 50 --data "$build/tokens.bin"
"$build/bin/dtc" compile test/models/tiny-gpt.onnx --gpus 4 --dp 2 --tp 2 \
  --pp 1 --cp 1 --global-batch 8 --micro-batch 2 --lr 1e-3 \
  -o "$build/tiny-gpt-4.dtc"
rm -rf "$build/tiny-gpt.ckpt"
"$build/bin/dtc" run "$build/tiny-gpt-4.dtc" --steps 10 --data "$build/tokens.bin" \
  --ckpt-dir "$build/tiny-gpt.ckpt"
"$build/bin/dtc" compile test/models/tiny-gpt.onnx --gpus 2 --dp 1 --tp 1 \
  --pp 2 --cp 1 --global-batch 8 --micro-batch 2 --lr 1e-3 \
  -o "$build/tiny-gpt-pp2.dtc" >/dev/null
"$build/bin/dtc" run "$build/tiny-gpt-pp2.dtc" --steps 20 \
  --data "$build/tokens.bin" --ckpt-dir "$build/tiny-gpt.ckpt" --resume
"$build/bin/dtc" ckpt verify "$build/tiny-gpt.ckpt"
"$build/bin/dtc" verify "$build/tiny-gpt-4.dtc"
