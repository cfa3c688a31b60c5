#!/usr/bin/env bash
# The README's test command: installs what dtc needs, builds it and runs
# every test (lit and GoogleTest) through ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
start=$(date +%s)
scripts/build.sh
echo "build: $(( $(date +%s) - start )) s"
# The numerical tests again with OpenBLAS forced to three x86 kernel
# families (issue 55: tolerances that hold on any CPU).
scripts/test-blas-families.sh "${DTC_BUILD_DIR:-build}"
# ctest's summary is the last thing printed (CI reads it).
exec ctest --test-dir "${DTC_BUILD_DIR:-build}" --output-on-failure \
  -j "$(nproc)"
