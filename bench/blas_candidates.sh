#!/usr/bin/env bash
# The candidate sgemm libraries side by side on dtc's transformer GEMM shapes
# (issue 31): Debian's OpenBLAS (its own kernel table, which dtc uses here,
# and each table OPENBLAS_CORETYPE can force that this CPU runs), Debian's
# BLIS, Debian's oneDNN (dnnl_sgemm) and MKL from PyPI, with and without
# MKL_ENABLE_INSTRUCTIONS=AVX2. bench/blas/bench_blas_candidates.cpp
# (standalone, compiled here with g++) times each shape, checks it against
# a double-precision reference and checks that repeated runs give the same
# bits; the end is a table of GFLOP/s, shape x library, and the winner per
# shape. Absent libraries are skipped, with a line saying so.
#
# MKL is a benchmark-only dependency: it is installed with pip into its own
# venv (bench/.venv-blas, or $DTC_BLAS_VENV), never needed by the tests.
# Usage: bench/blas_candidates.sh [THREADS]   (default: every core)
set -euo pipefail
cd "$(dirname "$0")/.."
threads="${1:-$(nproc)}"
venv="${DTC_BLAS_VENV:-$PWD/bench/.venv-blas}"
lib=/usr/lib/x86_64-linux-gnu
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

g++ -std=c++17 -O2 -o "$tmp/bench" bench/blas/bench_blas_candidates.cpp -ldl
grep -m1 '^model name' /proc/cpuinfo
echo "threads $threads"
export OMP_NUM_THREADS="$threads" OPENBLAS_NUM_THREADS="$threads" \
  MKL_NUM_THREADS="$threads" BLIS_NUM_THREADS="$threads"

failed=0
labels=()
# candidate LABEL LIBRARY [VAR=VALUE...]: one library's run, in its own
# process (the environment is read when the library loads).
candidate() {
  local label="$1" path="$2"
  shift 2
  if [[ ! -e "$path" ]]; then
    echo "skip $label: $path absent"
    return
  fi
  local rc=0
  env "$@" "$tmp/bench" "$path" "$label" "$threads" | tee -a "$tmp/results" ||
    rc=$?
  if ((rc != 0)); then
    echo "FAILED $label: exit $rc"
    failed=1
  fi
  labels+=("$label")
}

openblas="$lib/libopenblas.so.0"
candidate openblas "$openblas"
flags=$(grep -m1 '^flags' /proc/cpuinfo)
has() { [[ " $flags " == *" $1 "* ]]; }
for core in Zen Haswell SkylakeX; do
  case "$core" in
  SkylakeX) needs="avx512f avx512cd avx512bw avx512dq avx512vl" ;;
  *) needs="avx2 fma" ;;
  esac
  missing=""
  for flag in $needs; do has "$flag" || missing="$missing $flag"; done
  if [[ -n "$missing" ]]; then
    echo "skip openblas-${core,,}: the CPU lacks$missing"
  else
    candidate "openblas-${core,,}" "$openblas" OPENBLAS_CORETYPE="$core"
  fi
done

candidate blis-openmp "$lib/blis-openmp/libblis.so.4"
candidate blis-pthread "$lib/blis-pthread/libblis.so.4"
if ((threads == 1)); then
  candidate blis-serial "$lib/blis-serial/libblis.so.4"
else
  echo "skip blis-serial: single-threaded, measured with THREADS=1 only"
fi

if [[ -e "$lib/libdnnl.so.2" ]]; then
  candidate onednn "$lib/libdnnl.so.2"
else
  echo "skip onednn: $lib/libdnnl.so.2 absent (apt-get install libdnnl-dev)"
fi

if [[ ! -x "$venv/bin/python" ]]; then
  /usr/bin/python3 -m venv "$venv" &&
    "$venv/bin/python" -m pip install --quiet mkl ||
    echo "pip install mkl failed"
fi
mkl=$(find "$venv/lib" -maxdepth 1 -name 'libmkl_rt.so.[0-9]*' 2>/dev/null |
  sort | tail -1)
if [[ -n "$mkl" ]]; then
  # libmkl_rt loads its other libraries by name from the venv.
  candidate mkl "$mkl" LD_LIBRARY_PATH="$venv/lib"
  candidate mkl-avx2 "$mkl" LD_LIBRARY_PATH="$venv/lib" \
    MKL_ENABLE_INSTRUCTIONS=AVX2
else
  echo "skip mkl: no libmkl_rt.so in $venv/lib"
fi

if [[ -x .venv-export/bin/python ]]; then
  echo "skip torch.mm: not measured by this script (its MKL is the mkl row)"
else
  echo "skip torch.mm: .venv-export absent"
fi

# shape x library, GFLOP/s, and the winner of each shape.
echo
awk -v order="${labels[*]}" '
  $4 == "GFLOP/s" {
    gf[$2, $1] = $3; if (!($2 in seen)) { seen[$2] = 1; shapes[++ns] = $2 }
    if ($6 + 0 > err[$1] + 0) err[$1] = $6
    for (f = 7; f < NF; ++f) if ($f == "deterministic" && $(f + 1) != "yes")
      nondet[$1] = 1 }
  END {
    nl = split(order, libs, " ")
    printf "%-9s", "GFLOP/s"
    for (l = 1; l <= nl; ++l) printf " %15s", libs[l]
    printf "  %s\n", "winner"
    for (s = 1; s <= ns; ++s) {
      printf "%-9s", shapes[s]; best = ""; bestv = -1
      for (l = 1; l <= nl; ++l) {
        v = gf[shapes[s], libs[l]]
        printf " %15s", v == "" ? "-" : v
        if (v != "" && v + 0 > bestv) { bestv = v + 0; best = libs[l] }
      }
      printf "  %s\n", best
    }
    printf "%-9s", "maxrelerr"
    for (l = 1; l <= nl; ++l) printf " %15.1e", err[libs[l]]
    printf "\n%-9s", "determ."
    for (l = 1; l <= nl; ++l) printf " %15s", nondet[libs[l]] ? "no" : "yes"
    printf "\n"
  }' "$tmp/results"
exit "$failed"
