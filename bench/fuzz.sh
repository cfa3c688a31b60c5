#!/usr/bin/env bash
# Runs one libFuzzer target for SECONDS on a corpus seeded from the repo's
# fixtures (test/fuzz/corpus/<target without "fuzz-">/, with
# test/fuzz/<target without "fuzz-">.dict when there is one):
#   bench/fuzz.sh fuzz-program-loader 600
#   bench/fuzz.sh fuzz-cluster-json 600 -jobs=2   # extra args go to libFuzzer
#   bench/fuzz.sh fuzz-checkpoint 600
#   bench/fuzz.sh fuzz-plan-json 600
#   bench/fuzz.sh fuzz-onnx-importer 600
#   bench/fuzz.sh fuzz-mlir-parser 600
# Configures (once) a clang build in $DTC_FUZZ_BUILD_DIR (default build-fuzz)
# with -DDTC_BUILD_FUZZERS=ON and every library under ASan and libFuzzer's
# coverage instrumentation; builds only the target. Crashes are written to
# build-fuzz/fuzz-artifacts/<target>/; the grown corpus stays in
# build-fuzz/fuzz-corpus/<target>/ (the committed seeds are never modified).
# Needs scripts/setup-fuzz.sh's packages.
set -euo pipefail
cd "$(dirname "$0")/.."
# The project's Python (scripts/setup.sh), not the python3 on PATH.
source scripts/lib/python.sh
if [ $# -lt 2 ]; then
  echo "usage: bench/fuzz.sh TARGET SECONDS [libFuzzer options...]" >&2
  exit 2
fi
target="$1"
seconds="$2"
shift 2
seeds="test/fuzz/corpus/${target#fuzz-}"
if [ ! -d "$seeds" ]; then
  echo "bench/fuzz.sh: unknown target '$target' (no $seeds)" >&2
  exit 2
fi
build="${DTC_FUZZ_BUILD_DIR:-build-fuzz}"
prefix="$(llvm-config-22 --prefix)"
if [ ! -f "$build/build.ninja" ]; then
  flags="-fsanitize=address,fuzzer-no-link -fno-omit-frame-pointer -g"
  CC=clang-22 CXX=clang++-22 cmake -G Ninja -S . -B "$build" \
    -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_C_FLAGS="$flags" -DCMAKE_CXX_FLAGS="$flags" \
    -DMLIR_DIR="$prefix/lib/cmake/mlir" \
    -DLLVM_EXTERNAL_LIT="$prefix/bin/lit" \
    -DMLIR_LINK_MLIR_DYLIB=ON -DDTC_ENABLE_CUDA=OFF \
    -DDTC_BUILD_FUZZERS=ON
fi
ninja -C "$build" "$target"

corpus="$build/fuzz-corpus/$target"
artifacts="$build/fuzz-artifacts/$target"
mkdir -p "$corpus" "$artifacts"
seedDirs=("$seeds")
if [ "$target" = fuzz-program-loader ]; then
  # Generated seeds: one small program per kernel and operand shape.
  opSeeds="$build/fuzz-seeds/$target"
  if [ ! -d "$opSeeds" ]; then
    "$DTC_PYTHON" test/fuzz/make_op_seeds.py . "$opSeeds.tmp"
    mv "$opSeeds.tmp" "$opSeeds"
  fi
  seedDirs+=("$opSeeds")
fi
# Text inputs parse in time linear in their size: keep them small (the
# seeds are at most 10 KB).
maxLen=$((1 << 20))
if [ "$target" = fuzz-mlir-parser ]; then
  maxLen=$((64 << 10))
fi
dict=()
if [ -f "test/fuzz/${target#fuzz-}.dict" ]; then
  dict=(-dict="test/fuzz/${target#fuzz-}.dict")
fi
# One thread per kernel: OpenMP workers would only add noise to coverage.
# LSan's report at exit covers leaks.
OMP_NUM_THREADS=1 "$build/bin/$target" "$corpus" "${seedDirs[@]}" \
  -max_total_time="$seconds" -timeout=10 -rss_limit_mb=4096 \
  -max_len="$maxLen" -print_final_stats=1 \
  -artifact_prefix="$artifacts/" "${dict[@]}" "$@"
