#!/usr/bin/env bash
# Packs what scripts/gpu-check.sh runs into .gpukit/, for a GPU machine that
# has the NVIDIA driver, CUDA 13 (cudart, cuBLASLt) and NCCL but none of
# dtc's build dependencies (LLVM/MLIR 22, Open MPI, protobuf, OpenBLAS) and
# no network to install them: the lent H200 machines are such.
#
#   .gpukit/bin/      dtc itself (for `dtc calibrate --backend cuda`), the
#                     CUDA tests and the training-step benchmark, built
#                     into build-kit with static LLVM (DTC_STATIC_LLVM) for
#                     the given CUDA architectures
#   .gpukit/lib/      dtc's CUDA backend module (dtc-cuda.so, which dtc opens
#                     from ../lib) and the shared libraries they load that such a machine
#                     lacks (not glibc, libstdc++ or the CUDA/NCCL libraries:
#                     the machine's own are used)
#   .gpukit/bundles/  the tiny and the 4-block GPT bundles, compiled here
#   .gpukit/MANIFEST  commit, architectures, nvcc version
#
# .gpukit is ignored by git; the device tool takes it along with
# `carry: [".gpukit"]`, and `scripts/gpu-check.sh --kit .gpukit` runs it.
# Usage: scripts/gpu-kit.sh [--arch "90"]   (default 90: H100, H200)
set -euo pipefail
cd "$(dirname "$0")/.."
arch=90
while [ $# -gt 0 ]; do
  case "$1" in
    --arch) arch="$2"; shift 2 ;;
    *) echo "gpu-kit: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
say() { echo "== gpu-kit: $*"; }
die() { echo "gpu-kit: error: $*" >&2; exit 1; }

command -v nvcc >/dev/null || die "nvcc not on PATH: the kit needs the CUDA toolkit"
build=build-kit
kit=.gpukit
targets="dtc DtcCudaPlugin dtc-cuda-tests dtc-cuda-kernel-tests dtc-nccl-p2p-test bench-cuda-train-step"

# dtc itself (the usual build) compiles the bundles.
[ -x build/bin/dtc ] || scripts/build.sh >/dev/null
prefix="$(llvm-config-22 --prefix)"
if [ ! -f "$build/build.ninja" ]; then
  say "configuring $build (static LLVM, sm_$arch)"
  cmake -G Ninja -S . -B "$build" -DMLIR_DIR="$prefix/lib/cmake/mlir" \
    -DLLVM_EXTERNAL_LIT="$prefix/bin/lit" -DDTC_STATIC_LLVM=ON \
    -DDTC_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$arch" >/dev/null
else
  cmake -S . -B "$build" -DCMAKE_CUDA_ARCHITECTURES="$arch" >/dev/null
fi
say "building $targets"
ninja -C "$build" $targets >/dev/null

rm -rf "$kit.tmp"
mkdir -p "$kit.tmp/bin" "$kit.tmp/lib" "$kit.tmp/bundles"
for t in bin/dtc test/unit/dtc-cuda-tests test/unit/dtc-cuda-kernel-tests \
  test/mpi/dtc-nccl-p2p-test bench/cuda/bench-cuda-train-step; do
  cp "$build/$t" "$kit.tmp/bin/"
done
cp "$build/lib/dtc-cuda.so" "$kit.tmp/lib/"
strip "$kit.tmp"/bin/*

# Libraries every Linux with CUDA has (glibc, the C++ runtime) or that are
# the machine's own (driver, CUDA, NCCL: hundreds of MB, and must match it).
provided='^(linux-vdso|ld-linux|libc|libm|libdl|librt|libpthread|libgcc_s|libstdc\+\+|libcuda|libcudart|libcublas|libcublasLt|libnccl)\.'
for lib in $(ldd "$kit.tmp"/bin/* "$kit.tmp"/lib/dtc-cuda.so | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u); do
  name=$(basename "$lib")
  [[ "$name" =~ $provided ]] && continue
  cp -L "$lib" "$kit.tmp/lib/$name"
done
strip --strip-unneeded "$kit.tmp"/lib/* 2>/dev/null || true
# Every library the binaries load is now in the kit or the machine's own.
stray=$(LD_LIBRARY_PATH="$kit.tmp/lib" ldd "$kit.tmp"/bin/* "$kit.tmp"/lib/dtc-cuda.so |
  awk '$2 == "=>" {print $1, $3}' | while read -r name path; do
    [[ "$name" =~ $provided ]] || [[ "$path" == "$kit.tmp/lib/"* ]] || echo "$name"
  done | sort -u | tr '\n' ' ')
[ -z "$stray" ] || die "libraries left out of the kit: $stray"

say "compiling the bundles"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp" "$kit.tmp"' EXIT
scripts/gpu-bundles.sh build/bin/dtc "$kit.tmp/bundles"
# program.mlir is for people; the runtime reads program.pb.
rm -f "$kit.tmp"/bundles/*/program.mlir

{
  echo "commit $(git rev-parse HEAD)$(git diff --quiet HEAD || echo ' (with local changes)')"
  echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(. /etc/os-release && echo "$PRETTY_NAME")"
  echo "cuda_architectures $arch"
  echo "nvcc $(nvcc --version | tail -1)"
  # The GPU machine's glibc must be at least this (its libstdc++ likewise).
  echo "needs $(objdump -T "$kit.tmp"/bin/* "$kit.tmp"/lib/* 2>/dev/null |
    grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1)" \
    "$(objdump -T "$kit.tmp"/bin/* "$kit.tmp"/lib/* 2>/dev/null |
      grep -o 'GLIBCXX_[0-9.]*' | sort -uV | tail -1)"
} >"$kit.tmp/MANIFEST"
# The binaries travel compressed (the device tool carries 64 MiB in all).
tar -C "$kit.tmp" -cJf "$tmp/kit.tar.xz" bin lib
rm -rf "$kit"
mkdir -p "$kit"
mv "$tmp/kit.tar.xz" "$kit.tmp/MANIFEST" "$kit/"
mv "$kit.tmp/bundles" "$kit/"
say "$(du -sh "$kit" | cut -f1) in $kit: $(tr '\n' ';' <"$kit/MANIFEST")"
say "on the GPU machine: scripts/gpu-check.sh --kit $kit (device tool: carry [\"$kit\"])"
