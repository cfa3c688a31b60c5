#!/usr/bin/env bash
# Builds the whole test suite with AddressSanitizer + UndefinedBehaviorSanitizer
# (the "asan" preset of CMakePresets.json, into ./build-asan) and runs every
# test (lit and GoogleTest) through ctest. Extra arguments go to ctest, e.g.
# `scripts/sanitize.sh -R CpuKernel`.
set -euo pipefail
cd "$(dirname "$0")/.."
build=build-asan
start=$(date +%s)
if [ ! -f "$build/build.ninja" ]; then
  cmake --preset asan
fi
ninja -C "$build"
echo "build: $(( $(date +%s) - start )) s"

# A finding aborts the process (SIGABRT) with its stack, for both
# sanitizers: lit's `not` (tests of error exits) passes on any non-zero exit
# status, but fails on a signal, so a report inside `not dtc ...` still fails
# the test. LeakSanitizer stays on: LLVM's and MLIR's static state is
# reachable at exit and is not reported, and the suite has no leaks.
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:abort_on_error=1"
# allow_user_poisoning=0: LLVM's allocators poison memory the
# uninstrumented libMLIR.so then writes (MLIR attribute storage built by
# dtc's instrumented code): a false "use-after-poison" in StringAttr::get.
export ASAN_OPTIONS="detect_leaks=1:halt_on_error=1:abort_on_error=1:disable_coredump=1:allow_user_poisoning=0"
# Third-party leaks, each named (sanitizer builds keep Open MPI's plugins
# mapped so that their frames have names: runtime/mpi/MpiCommunicator.cpp).
export LSAN_OPTIONS="suppressions=$PWD/scripts/lsan.supp"
# Stacks are symbolized by LLVM's symbolizer when the PATH has none.
if ! command -v llvm-symbolizer >/dev/null &&
   [ -x /usr/lib/llvm-22/bin/llvm-symbolizer ]; then
  export ASAN_SYMBOLIZER_PATH=/usr/lib/llvm-22/bin/llvm-symbolizer
fi
test_start=$(date +%s)
status=0
ctest --test-dir "$build" --output-on-failure -j "$(nproc)" "$@" || status=$?
echo "tests: $(( $(date +%s) - test_start )) s"
exit "$status"
