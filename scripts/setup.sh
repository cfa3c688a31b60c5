#!/usr/bin/env bash
# Installs every system package dtc needs on Debian 12 (idempotent,
# non-interactive). Runs as root, or through sudo when available.
set -euo pipefail

packages=(
  # Build tools
  cmake ninja-build g++ ccache clang-format
  # LLVM/MLIR 22: libraries, tablegen, lit, FileCheck
  llvm-22-dev llvm-22-tools libmlir-22-dev mlir-22-tools zlib1g-dev
  libzstd-dev  # static LLVM for the GPU kit (scripts/gpu-kit.sh)
  # ONNX (and its conformance test data), protobuf
  libonnx-dev libonnx-testdata libprotobuf-dev protobuf-compiler
  # Command line, tests, runtime libraries
  libcli11-dev libgtest-dev libopenblas-dev openmpi-bin libopenmpi-dev
  libssl-dev  # SHA-256 of checkpoint chunks
  python3 python3-numpy python3-pip
  chromium  # headless, for the plan report test (test/cli/check_report.py)
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" \
    || missing+=("$p")
done

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages are installed"
else
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# Python's safetensors (Debian 12 has no package): the checkpoint test loads
# `dtc ckpt consolidate` output with it.
if ! python3 -c "import safetensors" 2>/dev/null; then
  echo "setup: installing python safetensors (pip)"
  # Without it only that test fails, not the whole setup.
  $SUDO python3 -m pip install -q --break-system-packages safetensors ||
    echo "setup: warning: pip could not install safetensors;" \
      "test/cli/ckpt-tools.test will fail"
fi
