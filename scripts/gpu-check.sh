#!/usr/bin/env bash
# On a machine with an NVIDIA GPU (CUDA 12+/13 toolkit, cuBLASLt, NCCL, and
# the packages of scripts/build.sh): builds dtc with the CUDA backend into
# build-gpu, runs the CUDA tests (every kernel against the CPU kernel), then
# times training steps of a GPT on one GPU and prints the achieved TFLOP/s
# and MFU (peak: /work/shared/data/hardware.csv or --peak-tflops), and
# calibrates the cost model on the GPU (dtc calibrate --backend cuda).
#
# Usage: scripts/gpu-check.sh [--steps N] [--skip-tests] [--bundle DIR]
#                             [--dtc PATH] [--peak-tflops X] [--kit DIR]
#   --kit DIR     run the binaries and bundles scripts/gpu-kit.sh packed
#                 (.gpukit) instead of building: for a machine without
#                 dtc's build dependencies (no LLVM 22, MPI or protobuf).
#   --bundle DIR  a bundle compiled elsewhere (dtc compile --gpus 1): skips
#                 building dtc and compiling the model on this machine.
#   --dtc PATH    a dtc binary to compile the model with (default: build/bin/dtc
#                 when it runs, else dtc is built into build-gpu, the slow
#                 part of a cold run).
# Environment: DTC_GPU_BUILD_DIR (default build-gpu), DTC_GPU_DEADLINE_S
# (default 450: phases stop with a message rather than overrun 8 minutes).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
build="${DTC_GPU_BUILD_DIR:-build-gpu}"
deadline=$((SECONDS + ${DTC_GPU_DEADLINE_S:-450}))
steps=8
skip_tests=0
bundle=""
peak=""
dtc=""
kit=""
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) steps="$2"; shift 2 ;;
    --skip-tests) skip_tests=1; shift ;;
    --bundle) bundle="$2"; shift 2 ;;
    --peak-tflops) peak="$2"; shift 2 ;;
    --dtc) dtc="$2"; shift 2 ;;
    --kit) kit="$2"; shift 2 ;;
    *) echo "gpu-check: unknown argument '$1'" >&2; exit 2 ;;
  esac
done

say() { echo "== gpu-check [$((SECONDS))s]: $*"; }
die() { echo "gpu-check: error: $*" >&2; exit 1; }
# Runs "$@" with what is left of the deadline (at most $1 seconds).
budget() {
  local cap=$1; shift
  local left=$((deadline - SECONDS))
  [ "$left" -gt 10 ] || die "out of time before: $*"
  [ "$left" -lt "$cap" ] && cap=$left
  timeout --kill-after=10 "$cap" "$@"
}

command -v nvidia-smi >/dev/null || die "nvidia-smi not found: no NVIDIA driver"
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1) ||
  die "nvidia-smi sees no GPU"
cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 |
      tr -d '.[:space:]')
say "GPU: $gpu (sm_$cap)"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Unlike the tests, this runs on a lent GPU machine where setup.sh never
# ran: its python3 (standard library only) is the host's on purpose, to
# unpack the kit and find that host's nvidia-* site-packages.
tiny=""
if [ -n "$kit" ]; then
  [ -f "$kit/kit.tar.xz" ] ||
    die "$kit/kit.tar.xz missing: run scripts/gpu-kit.sh where dtc builds"
  say "kit: $(tr '\n' ';' <"$kit/MANIFEST")"
  unpacked="$tmp/kit"
  mkdir -p "$unpacked"
  tar -C "$unpacked" -xJf "$kit/kit.tar.xz" 2>/dev/null ||
    python3 -m tarfile -e "$kit/kit.tar.xz" "$unpacked" ||
    die "cannot unpack $kit/kit.tar.xz"
  # This machine's CUDA runtime, cuBLASLt and NCCL: from the linker's
  # cache, the toolkit, or Python's nvidia-* packages.
  libpath="$unpacked/lib"
  sites=$(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null || true)
  for so in libcudart.so.13 libcublasLt.so.13 libnccl.so.2; do
    ldconfig -p 2>/dev/null | grep -q "$so" && continue
    found=$(find /usr/local/cuda*/ $sites -name "$so" 2>/dev/null | head -1 || true)
    [ -n "$found" ] ||
      die "$so not found (ldconfig, /usr/local/cuda*, Python's nvidia packages)"
    libpath="$libpath:$(dirname "$found")"
  done
  export LD_LIBRARY_PATH="$libpath${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  missing=$(ldd "$unpacked"/bin/* "$unpacked"/lib/dtc-cuda.so | grep "not found" | sort -u | tr -s ' \t\n' ' ' || true)
  [ -z "$missing" ] || die "the kit's binaries miss libraries:$missing"
  tests_bin="$unpacked/bin"
  bench_bin="$unpacked/bin"
  bundle="${bundle:-$kit/bundles/gpt.dtc}"
  tiny="$kit/bundles/tiny.dtc"
else
  command -v nvcc >/dev/null || die "nvcc not on PATH (add the CUDA toolkit's bin)"
  nvcc --version | tail -1
  command -v llvm-config-22 >/dev/null ||
    die "llvm-config-22 not found: run scripts/setup.sh (LLVM/MLIR 22) first"
  prefix="$(llvm-config-22 --prefix)"

  if [ ! -f "$build/build.ninja" ]; then
    say "configuring $build"
    mkdir -p "$build"
    budget 180 cmake -G Ninja -S . -B "$build" \
      -DMLIR_DIR="$prefix/lib/cmake/mlir" \
      -DLLVM_EXTERNAL_LIT="$prefix/bin/lit" \
      -DMLIR_LINK_MLIR_DYLIB=ON -DCMAKE_BUILD_TYPE=Release \
      -DDTC_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$cap" >"$build/gpu-check-configure.log" 2>&1 ||
      { tail -30 "$build/gpu-check-configure.log"; die "cmake failed (log: $build/gpu-check-configure.log)"; }
  fi
  jobs=$(nproc)

  # One ninja run for everything needed, so the whole machine builds at once.
  targets="dtc-cuda-tests dtc-cuda-kernel-tests dtc-nccl-p2p-test bench-cuda-train-step"
  if [ -z "$bundle" ] && [ -z "$dtc" ]; then
    if [ -x build/bin/dtc ] && build/bin/dtc --help >/dev/null 2>&1; then
      dtc=build/bin/dtc
    else
      dtc="$build/bin/dtc"
      targets="$targets dtc"
    fi
  fi
  say "building $targets"
  budget 360 ninja -C "$build" -j"$jobs" $targets >"$build/gpu-check-build.log" 2>&1 ||
    { tail -40 "$build/gpu-check-build.log"; die "build failed (log: $build/gpu-check-build.log)"; }
  tests_bin="$build/test/unit"
  bench_bin="$build/bench/cuda"
fi

if [ "$skip_tests" = 0 ]; then
  say "CUDA tests"
  budget 180 "$tests_bin/dtc-cuda-tests" --gtest_brief=1 ||
    die "dtc-cuda-tests failed"
  budget 240 "$tests_bin/dtc-cuda-kernel-tests" --gtest_brief=1 ||
    die "dtc-cuda-kernel-tests failed"
  # NCCL sends and receives in the orders programs start them (two GPUs).
  gpus=$(nvidia-smi --query-gpu=name --format=csv,noheader | wc -l)
  p2p="$build/test/mpi/dtc-nccl-p2p-test"
  [ -n "$kit" ] && p2p="$unpacked/bin/dtc-nccl-p2p-test"
  if [ "$gpus" -ge 2 ] && ! command -v mpirun >/dev/null; then
    say "NCCL point-to-point test skipped: no mpirun on this machine"
  elif [ "$gpus" -ge 2 ]; then
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
      budget 150 mpirun --oversubscribe -np 2 "$p2p" ||
      die "dtc-nccl-p2p-test failed"
  else
    say "NCCL point-to-point test skipped: $gpus GPU (needs 2)"
  fi
fi

# End to end first: a tiny GPT's training steps on the CUDA backend and on
# the CPU kernels (same seed: same weights and tokens) give the same losses.
if [ -z "$tiny" ] && [ -n "$dtc" ]; then
  say "compiling the bundles with $dtc"
  budget 300 scripts/gpu-bundles.sh "$dtc" "$tmp" >"$tmp/compile.log" 2>&1 ||
    { cat "$tmp/compile.log"; die "dtc compile failed"; }
  tiny="$tmp/tiny.dtc"
  bundle="${bundle:-$tmp/gpt.dtc}"
fi
if [ -n "$tiny" ]; then
  say "tiny GPT: CUDA losses against the CPU kernels"
  bench="$bench_bin/bench-cuda-train-step"
  budget 60 "$bench" "$tiny" 3 --cpu >"$tmp/tiny-cpu.json"
  budget 60 "$bench" "$tiny" 3 >"$tmp/tiny-cuda.json"
  python3 - "$tmp/tiny-cpu.json" "$tmp/tiny-cuda.json" <<'PY' ||
import json, sys
cpu, cuda = ([json.loads(l) for l in open(f)][1:] for f in sys.argv[1:3])
ok = True
for a, b in zip(cpu, cuda):
    for key in ("loss", "grad_norm"):
        rel = abs(a[key] - b[key]) / max(abs(a[key]), 1e-12)
        print("  step %d %-9s cpu %.6f cuda %.6f (rel %.1e)"
              % (a["step"], key, a[key], b[key], rel))
        ok = ok and rel < 1e-3
sys.exit(0 if ok else 1)
PY
    die "the CUDA training steps differ from the CPU kernels' (above)"
fi

[ -n "$bundle" ] || die "no bundle: pass --bundle, --dtc or --kit"
[ -f "$bundle/program.pb" ] || die "$bundle/program.pb missing"

run_bench() { # $1: label, rest: environment
  local label=$1; shift
  say "training steps ($label)"
  budget 150 env "$@" "$bench_bin/bench-cuda-train-step" "$bundle" "$steps" \
    >"$tmp/$label.json" 2>"$tmp/$label.err" ||
    { cat "$tmp/$label.err"; tail -3 "$tmp/$label.json"; die "benchmark ($label) failed"; }
}
run_bench fp32 DTC_CUDA_TF32=0
run_bench tf32 DTC_CUDA_TF32=1

python3 - "$tmp" "$bundle" "$gpu" "${peak}" "$root" <<'PY'
import csv, json, os, statistics, sys
tmp, bundle, gpu, peak_arg, root = sys.argv[1:6]
plan = json.load(open(os.path.join(bundle, "plan.json")))
flops_per_token = plan["model"]["flops_per_token"]
# hardware.csv's dense peaks; the H100/H200 rows' values if it is absent.
peaks = {"H200-SXM-141GB": {"bf16_dense_tflops": "989.4",
                            "tf32_dense_tflops": "494.7"},
         "H100-SXM5-80GB": {"bf16_dense_tflops": "989.4",
                            "tf32_dense_tflops": "494.7"}}
for hw in (os.path.join(root, "..", "shared", "data", "hardware.csv"),
           os.path.join(root, "shared", "data", "hardware.csv")):
    if os.path.exists(hw):
        for row in csv.DictReader(open(hw)):
            peaks[row["gpu"]] = row
        break
def peak_for(column):
    if peak_arg:
        return float(peak_arg)
    key = "H200" if "H200" in gpu else "H100" if "H100" in gpu else None
    for name, row in peaks.items():
        if key and name.startswith(key) and row.get(column):
            return float(row[column])
    return None
bf16 = peak_for("bf16_dense_tflops")
tf32 = peak_for("tf32_dense_tflops")
print("GPU                          %s" % gpu)
print("model FLOPs/token (fwd+bwd)  %.4g" % flops_per_token)
for label in ("fp32", "tf32"):
    lines = [json.loads(l) for l in open(os.path.join(tmp, label + ".json"))]
    info, steps = lines[0], lines[1:]
    tokens = info["tokens_per_step"]
    # The first steps build cuBLASLt plans and warm the allocator.
    timed = steps[2:] or steps
    step_s = statistics.median(s["step_time_s"] for s in timed)
    tflops = flops_per_token * tokens / step_s / 1e12
    print("[%s] step time (median of %d)  %.4f s, %d tokens, %.0f tokens/s"
          % (label, len(timed), step_s, tokens, tokens / step_s))
    print("[%s] achieved                  %.2f TFLOP/s" % (label, tflops))
    if bf16:
        print("[%s] MFU vs bf16 dense peak    %.2f%% (peak %.1f TFLOP/s)"
              % (label, 100 * tflops / bf16, bf16))
    if tf32 and label == "tf32":
        print("[%s] vs tf32 dense peak        %.2f%% (peak %.1f TFLOP/s)"
              % (label, 100 * tflops / tf32, tf32))
    print("[%s] loss                      %.3f -> %.3f"
          % (label, steps[0]["loss"], steps[-1]["loss"]))
    print("[%s] device memory             variables %.1f MiB, micro_step arena %.1f MiB"
          % (label, info["device_variable_bytes"] / 2**20,
             info["micro_step_arena_bytes"] / 2**20))
PY

# The cost model's constants for this GPU (dtc calibrate --backend cuda):
# GEMMs, HBM, attention, a small bf16 training step; NVLink where there
# are two GPUs. The cluster file lands in $DTC_GPU_OUT (e.g. the device
# tool's $OUT) when set.
calibrate_dtc="$dtc"
[ -n "$kit" ] && calibrate_dtc="$unpacked/bin/dtc"
if [ -n "$calibrate_dtc" ] && [ -x "$calibrate_dtc" ]; then
  out_dir="${DTC_GPU_OUT:-$tmp}"
  mkdir -p "$out_dir"
  say "dtc calibrate --backend cuda --quick"
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
    budget 240 "$calibrate_dtc" calibrate --backend cuda --quick \
    -o "$out_dir/calibrated-cuda.json" || die "dtc calibrate --backend cuda failed"
else
  say "dtc calibrate skipped: no dtc binary (pass --dtc or a kit with bin/dtc)"
fi
say "done"
