#!/usr/bin/env bash
# One configuration of test/cli/train-oracle.test: compile MODEL with the
# oracle's hyperparameters and the plan flags given, train two steps on the
# oracle's rows, consolidate, and compare everything with PyTorch's step
# (check_oracle.py prints one line per check and exits 1 on a failure).
#
#   oracle_run.sh DTC PYTHON WORK NAME [dtc compile plan flags...]
set -euo pipefail
dtc=$1 python=$2 work=$3 name=$4
shift 4
here=$(cd "$(dirname "$0")" && pwd)
oracle="$here/../../models/oracle"
rm -rf "$work" && mkdir -p "$work"
"$dtc" compile "$oracle/$name.onnx" --seq-len 8 --global-batch 4 --lr 1e-3 \
  --lr-schedule constant --warmup-steps 0 -o "$work/b.dtc" "$@" > /dev/null
# A model with its own batch (NAME.data, safetensors shards) trains on it;
# the token models on the oracle's token file.
data="$oracle/tokens.bin"
[[ -d "$oracle/$name.data" ]] && data="$oracle/$name.data"
"$dtc" run "$work/b.dtc" --steps 2 --data "$data" --seed 0 \
  --ckpt-dir "$work/ck" --save-every 1 --log-json > "$work/log"
"$dtc" ckpt consolidate "$work/ck" -o "$work/model.safetensors" > /dev/null
"$python" "$here/check_oracle.py" "$oracle/$name.reference" "$work/ck" \
  "$work/log" --consolidated "$work/model.safetensors"
