#!/usr/bin/env bash
# Configures and builds dtc into ./build (or $DTC_BUILD_DIR) with Ninja
# against Debian's LLVM/MLIR 22. Extra arguments go to cmake.
set -euo pipefail
cd "$(dirname "$0")/.."
build="${DTC_BUILD_DIR:-build}"
prefix="$(llvm-config-22 --prefix)"
if [ ! -f "$build/build.ninja" ]; then
  cmake -G Ninja -S . -B "$build" \
    -DMLIR_DIR="$prefix/lib/cmake/mlir" \
    -DLLVM_EXTERNAL_LIT="$prefix/bin/lit" \
    -DMLIR_LINK_MLIR_DYLIB=ON "$@"
fi
ninja -C "$build"
