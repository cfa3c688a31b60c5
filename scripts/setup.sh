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
  libmimalloc-dev  # dtc's allocator (docs/architecture.md)
  python3 python3-venv python3-pip
  chromium  # headless, for the plan report test (test/cli/check_report.py)
  strace  # which files a command touched (test/cli/touched-paths.test)
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

# The project's own Python environment: the tests and benchmarks run this
# interpreter, never the python3 first on PATH (which may be pyenv's, conda's
# or a user's, without numpy). Made from Debian's interpreter; packages from
# scripts/requirements-test.txt; reinstalled only when that file changes.
root="$(cd "$(dirname "$0")/.." && pwd)"
venv="${DTC_VENV:-$root/.venv}"
requirements="$root/scripts/requirements-test.txt"
stamp="$venv/.dtc-requirements"
if [ ! -x "$venv/bin/python" ]; then
  echo "setup: creating the Python environment $venv"
  /usr/bin/python3 -m venv "$venv"
fi
if ! cmp -s "$requirements" "$stamp"; then
  echo "setup: installing $(grep -c '^[a-z]' "$requirements") Python packages into $venv"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check \
    -r "$requirements"
  cp "$requirements" "$stamp"
fi
# Self-check: the packages import from the venv's interpreter.
"$venv/bin/python" -c "import numpy, safetensors.numpy" || {
  echo "setup: error: $venv lacks numpy or safetensors; delete it and rerun" >&2
  exit 1
}
echo "setup: Python environment $venv ready"
