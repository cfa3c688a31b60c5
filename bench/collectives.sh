#!/usr/bin/env bash
# Bus bandwidth of the MPI backend's all-reduce, all-gather and
# reduce-scatter (start + wait through MpiCommunicator) against the plain
# blocking MPI calls in the same run, f32 buffers of 1 to 64 MiB, under
# `mpirun -np 2` and `-np 4` (oversubscribed where the machine has fewer
# cores). Target: ratio >= 0.9 at every size.
# Usage: bench/collectives.sh [BUILD_DIR] [MAX_MIB] [BLOCKS]
#        (default: build, 64, 9)
set -euo pipefail
cd "$(dirname "$0")/.."
build="${1:-build}"
max_mib="${2:-64}"
blocks="${3:-9}"
# Quiet unless the build fails (a reconfigure prints CMake's warnings).
if ! log=$(ninja -C "$build" bench-collectives 2>&1); then
  echo "$log" >&2
  exit 1
fi
# Containers run as root, which Open MPI refuses unless told.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
for np in 2 4; do
  echo "== mpirun -np $np"
  mpirun --oversubscribe -np "$np" \
    "$build/bench/collectives/bench-collectives" "$max_mib" "$blocks"
done
