#!/usr/bin/env bash
# One row of the compatibility matrix against PyTorch's own training step
# (issue 55): compile <row>.onnx with the oracle's hyperparameters (one
# device, global batch 4, sequence 8, lr 1e-3 constant), train two steps on
# oracle-tokens.bin with seed 0, consolidate, and compare loss, gradient
# norm, gradients, parameters after each step and the consolidated
# state_dict with <row>.reference.{json,safetensors}
# (scripts/compat_oracle.py) through test/cli/Inputs/check_oracle.py,
# which prints one ok/FAIL line per check and exits 1 on a failure.
#
#   oracle_row.sh <dtc> <python> <compat dir> <row> <work dir>
set -euo pipefail
dtc=$1 python=$2 compat=$3 row=$4 work=$5
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work" && mkdir -p "$work"
"$dtc" compile "$compat/$row.onnx" --gpus 1 --seq-len 8 --global-batch 4 \
  --lr 1e-3 --lr-schedule constant --warmup-steps 0 -o "$work/b.dtc" \
  > /dev/null
"$dtc" run "$work/b.dtc" --steps 2 --data "$compat/oracle-tokens.bin" \
  --seed 0 --ckpt-dir "$work/ck" --save-every 1 --log-json > "$work/log"
"$dtc" ckpt consolidate "$work/ck" -o "$work/model.safetensors" > /dev/null
"$python" "$here/../cli/Inputs/check_oracle.py" "$compat/$row.reference" \
  "$work/ck" "$work/log" --consolidated "$work/model.safetensors"
