#!/usr/bin/env bash
# Runs test/unit/CudaKernelTest.cpp (every CUDA kernel against the CPU
# kernel) on this CPU: runtime/cuda/*.cu are compiled as host C++ against
# include/ (threads per block, __syncthreads, warp shuffles, atomics, bf16
# and f16, launch-limit checks), the runtime API and a reference cuBLASLt
# come from EmulatedRuntime.cpp, and the real dispatcher
# (runtime/cuda/CudaKernels.cpp) and CPU backend are linked in. See
# README.md for what this does and does not check.
# Usage: scripts/cuda-emulation/run.sh [BUILD_DIR] [GTEST_FILTER]
#   (default: build, every test but the attention case whose 66000-block
#   grid is past what the emulator runs)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
filter="${2:--*b1100*}"
work="$build/cuda-emulation"
mkdir -p "$work/gen" "$work/obj"
# The libraries linked below (the CPU backend, the runtime core).
ninja -C "$build" DtcCpuBackend DtcRuntimeCore DtcProgramProto >/dev/null

flags=(-std=c++20 -O1 -g -pthread -Wno-ignored-attributes -I"$here/include"
       -I"$root" -I"$build" -isystem /usr/lib/llvm-22/include)
compile() { # $1: source, $2: object (kept while newer than both)
  [ "$2" -nt "$1" ] && [ "$2" -nt "$here/include/emu.h" ] ||
    g++ "${flags[@]}" -c "$1" -o "$2"
}
for cu in "$root"/runtime/cuda/*.cu; do
  name=$(basename "$cu" .cu)
  [ "$name" = CudaProbe ] && continue # EmulatedProbe.cpp stands in
  python3 "$here/rewrite_launches.py" "$cu" "$work/gen/$name.cpp.new"
  cmp -s "$work/gen/$name.cpp.new" "$work/gen/$name.cpp" ||
    mv "$work/gen/$name.cpp.new" "$work/gen/$name.cpp"
  rm -f "$work/gen/$name.cpp.new"
  compile "$work/gen/$name.cpp" "$work/obj/$name.o" &
done
wait
compile "$here/EmulatedRuntime.cpp" "$work/obj-runtime.o"
compile "$here/EmulatedProbe.cpp" "$work/obj-probe.o"
compile "$root/runtime/cuda/CudaKernels.cpp" "$work/obj-kernels.o"
# The kernel test without its NCCL section (NCCL is not emulated).
python3 - "$root/test/unit/CudaKernelTest.cpp" "$work/KernelTest.cpp" <<'PY'
import sys
src = open(sys.argv[1]).read()
start = src.rindex('//===', 0, src.index('// NCCL on one GPU'))
end = src.rindex('} // namespace')
open(sys.argv[2], 'w').write(src[:start] + src[end:])
PY
compile "$work/KernelTest.cpp" "$work/obj-test.o"
g++ -o "$work/emulated-kernel-tests" "$work"/obj-test.o "$work"/obj-kernels.o \
  "$work"/obj-runtime.o "$work"/obj-probe.o "$work"/obj/*.o \
  "$build/lib/libDtcCpuBackend.a" "$build/lib/libDtcRuntimeCore.a" \
  "$build/runtime/libDtcProgramProto.a" -lgtest_main -lgtest -lprotobuf \
  /usr/lib/llvm-22/lib/libLLVM.so -lopenblas -lgomp -lpthread -ldl
"$work/emulated-kernel-tests" --gtest_filter="$filter" --gtest_brief=1
