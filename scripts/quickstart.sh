#!/usr/bin/env bash
# The README's first command: installs, builds, and compiles the bundled
# example (a small GPT exported from PyTorch) for 8 GPUs.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
build="${DTC_BUILD_DIR:-build}"
"$build/bin/dtc" compile test/models/tiny-gpt.onnx --gpus 8 --seq-len 32 \
  -o "$build/tiny-gpt.dtc"
