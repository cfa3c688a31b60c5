#!/usr/bin/env bash
# Packages for bench/fuzz.sh (the libFuzzer targets of test/fuzz): clang 22,
# its sanitizer runtimes, libFuzzer and its OpenMP runtime. The normal build and tests do not
# need them. Runs as root, or through sudo when available.
set -euo pipefail
sudo=""
if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null; then
  sudo="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get install -y --no-install-recommends clang-22 libclang-rt-22-dev \
  libfuzzer-22-dev libomp-22-dev
