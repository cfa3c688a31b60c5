#!/usr/bin/env bash
# dtc's one-device training step at 1 thread, 2 threads and dtc's default
# (issue 60): tiny-gpt (the quick start's model) and the two
# bench/vs_pytorch models, side by side in one run, as ratios to one thread.
# Run it on an otherwise idle machine. PyTorch exports the large models:
# it lives in the benchmark venv (.venv-bench, or $DTC_BENCH_VENV).
# Usage: bench/threads.sh [BUILD_DIR] [REPEATS]   (default: build, 3)
set -euo pipefail
cd "$(dirname "$0")/.."
build="${1:-build}"
repeats="${2:-3}"
source bench/vs_pytorch/venv.sh
ninja -C "$build" dtc >/dev/null
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "cores: $(nproc), load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
"$venv/bin/python" bench/vs_pytorch/threads.py "$build/bin/dtc" "$tmp" \
  --repeats "$repeats" 2>"$tmp/log" || { cat "$tmp/log"; exit 1; }
