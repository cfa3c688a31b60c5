#!/usr/bin/env bash
# Recovery time R of `dtc run --elastic` (issue 59) on the CPU runtime: a
# tiny GPT at dp 2 x tp 2 (global batch 12) loses rank 3 halfway through
# step 4; R is from the lost rank to the end of the new plan's first step
# (rank 0's `elastic: recovered in` line). Beside it, what a user runs
# instead once they notice: `dtc compile --gpus 3` by hand and `dtc run
# --resume` to the end of the first step (the time a person takes to act
# is not counted). Each figure is printed with its ratio to that baseline.
# Usage: bench/elastic.sh [BUILD_DIR] [REPEATS]
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/python.sh
build="${1:-build}"
repeats="${2:-3}"
dtc="$build/bin/dtc"
ninja -C "$build" dtc >/dev/null
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$DTC_PYTHON" test/cli/Inputs/make_tokens.py "$tmp/tokens.bin" 20000 256
"$dtc" compile test/models/tiny-gpt.onnx --gpus 4 --dp 2 --tp 2 \
  --global-batch 12 -o "$tmp/b4" >/dev/null
now() { date +%s.%N; }
for i in $(seq "$repeats"); do
  rm -rf "$tmp/ck" "$tmp/manual"
  DTC_FAULT_KILL_RANK=3:4 "$dtc" run "$tmp/b4" --steps 6 \
    --data "$tmp/tokens.bin" --ckpt-dir "$tmp/ck" --save-every 1 \
    --elastic 2:4 --log-json >/dev/null 2>"$tmp/elastic.err"
  elastic=$(sed -n 's/^elastic: recovered in \([0-9.]*\) s.*/\1/p' \
    "$tmp/elastic.err")
  # The baseline: the same loss at the same step, recovered by hand.
  DTC_FAULT_KILL_RANK=3:4 "$dtc" run "$tmp/b4" --steps 6 \
    --data "$tmp/tokens.bin" --ckpt-dir "$tmp/manual" --save-every 1 \
    --log-json >/dev/null 2>&1 || true
  start=$(now)
  "$dtc" compile test/models/tiny-gpt.onnx --gpus 3 --global-batch 12 \
    -o "$tmp/b3" >/dev/null
  step=$(sed -n 's/^step-0*//p' "$tmp/manual/latest")  # the newest committed
  "$dtc" run "$tmp/b3" --steps $((step + 1)) --data "$tmp/tokens.bin" \
    --ckpt-dir "$tmp/manual" --resume --log-json >/dev/null 2>&1
  manual=$("$DTC_PYTHON" -c "print(f'{$(now) - $start:.2f}')")
  "$DTC_PYTHON" -c "
e, m = $elastic, $manual
print(f'run $i: elastic R {e:.2f} s; by hand (compile + resume + one step) {m:.2f} s; ratio {e / m:.2f}')"
done
